package handlers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/egressselector"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	kubeletclient "k8s.io/kubernetes/pkg/kubelet/client"
)

// kubeletPreferredAddressTypes is the order node addresses are tried in:
// the InternalIP first, as nodes here seldom have resolvable names.
var kubeletPreferredAddressTypes = []string{
	string(corev1.NodeInternalIP), string(corev1.NodeHostName), string(corev1.NodeInternalDNS),
	string(corev1.NodeExternalDNS), string(corev1.NodeExternalIP),
}

// newKubeletConnections builds how the server reaches kubelets.
func (s *API) newKubeletConnections() (kubeletclient.ConnectionInfoGetter, error) {
	cfg := kubeletclient.KubeletClientConfig{
		Port:                  10250,
		PreferredAddressTypes: kubeletPreferredAddressTypes,
		TLSClientConfig: kubeletclient.KubeletTLSConfig{
			CertFile: s.KubeletCertFile, KeyFile: s.KubeletKeyFile, CAFile: s.KubeletCAFile,
		},
	}
	if s.ClusterDial != nil {
		cfg.Lookup = func(egressselector.NetworkContext) (utilnet.DialFunc, error) { return s.ClusterDial, nil }
	}
	nodes := kubeletclient.NodeGetterFunc(func(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
		node := &corev1.Node{}
		r, _ := s.Registry.Lookup(corev1.SchemeGroupVersion.WithResource("nodes"))
		if err := s.storageFor(r).Get(ctx, r.Key("", name), k8sstorage.GetOptions{}, node); err != nil {
			return nil, storeerr.InterpretGetError(err, corev1.Resource("nodes"), name)
		}
		return node, nil
	})
	return kubeletclient.NewNodeConnectionInfoGetter(nodes, cfg)
}

// Kubelets is how the server reaches kubelets, made at first use (503
// if that failed).
func (s *API) Kubelets() (kubeletclient.ConnectionInfoGetter, error) {
	s.kubeletOnce.Do(func() { s.kubelets, s.kubeletErr = s.newKubeletConnections() })
	if s.kubeletErr != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("kubelet client: %v", s.kubeletErr))
	}
	return s.kubelets, nil
}

// NewProxyTransport is how the proxy subresources reach pods (and nodes
// on other ports than the kubelet's), as kube-apiserver's proxy
// transport: dial (nil: net.Dialer's DialContext) by IP, so TLS is not
// verified.
func NewProxyTransport(dial utilnet.DialFunc) http.RoundTripper {
	return utilnet.SetTransportDefaults(&http.Transport{
		DialContext:     dial,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	})
}
