package apiserver

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/kubernetes/pkg/controlplane/controller/clusterauthenticationtrust"
)

// The request-header headers the aggregation proxy sets, as
// kube-apiserver's defaults with a front proxy.
var (
	requestHeaderUsernameHeaders = headerrequest.StaticStringSlice{"X-Remote-User"}
	requestHeaderUIDHeaders      = headerrequest.StaticStringSlice{"X-Remote-Uid"}
	requestHeaderGroupHeaders    = headerrequest.StaticStringSlice{"X-Remote-Group"}
	requestHeaderExtraPrefixes   = headerrequest.StaticStringSlice{"X-Remote-Extra-"}
)

// startAuthenticationTrust publishes, with kube-apiserver's own
// controller, the client CA, the requestheader CA, allowed names and
// headers in kube-system/extension-apiserver-authentication (merged with
// what other API servers published there), where aggregated servers such
// as metrics-server read whom to trust. Without a requestheader CA and a
// client CA in the configuration it does nothing. It stops when stop is
// closed.
func (s *Server) startAuthenticationTrust(stop <-chan struct{}) error {
	if s.cfg.RequestHeaderCAFile == "" && s.cfg.ClientCAFile == "" {
		return nil
	}
	info := clusterauthenticationtrust.ClusterAuthenticationInfo{}
	ctx, cancel := context.WithCancel(context.Background())
	if s.cfg.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", s.cfg.ClientCAFile)
		if err != nil {
			cancel()
			return fmt.Errorf("apiserver: client CA: %w", err)
		}
		go ca.Run(ctx, 1)
		info.ClientCA = ca
	}
	if s.cfg.RequestHeaderCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("request-header", s.cfg.RequestHeaderCAFile)
		if err != nil {
			cancel()
			return fmt.Errorf("apiserver: requestheader CA: %w", err)
		}
		go ca.Run(ctx, 1)
		info.RequestHeaderCA = ca
		info.RequestHeaderAllowedNames = headerrequest.StaticStringSlice(s.cfg.RequestHeaderAllowedNames)
		info.RequestHeaderUsernameHeaders = requestHeaderUsernameHeaders
		info.RequestHeaderUIDHeaders = requestHeaderUIDHeaders
		info.RequestHeaderGroupHeaders = requestHeaderGroupHeaders
		info.RequestHeaderExtraHeaderPrefixes = requestHeaderExtraPrefixes
	}
	c := clusterauthenticationtrust.NewClusterAuthenticationTrustController(info, s.client)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 1)
	}()
	go func() {
		<-stop
		cancel()
	}()
	s.stops = append(s.stops, func() { cancel(); <-done })
	return nil
}
