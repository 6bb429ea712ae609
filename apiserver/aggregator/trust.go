package aggregator

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
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

// TrustOptions are the CAs to publish, and the client to publish with.
type TrustOptions struct {
	ClientCAFile, RequestHeaderCAFile string
	RequestHeaderAllowedNames         []string
	Client                            kubernetes.Interface
}

// StartAuthenticationTrust publishes, with kube-apiserver's own
// controller, the client CA, the requestheader CA, allowed names and
// headers in kube-system/extension-apiserver-authentication (merged with
// what other API servers published there), where aggregated servers such
// as metrics-server read whom to trust. Without a requestheader CA and a
// client CA it does nothing. It stops when stop is closed; shutdown
// stops it and waits.
func StartAuthenticationTrust(opts TrustOptions, stop <-chan struct{}) (shutdown func(), err error) {
	if opts.RequestHeaderCAFile == "" && opts.ClientCAFile == "" {
		return func() {}, nil
	}
	info := clusterauthenticationtrust.ClusterAuthenticationInfo{}
	ctx, cancel := context.WithCancel(context.Background())
	if opts.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", opts.ClientCAFile)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("apiserver: client CA: %w", err)
		}
		go reloadEvery(ctx, ca, reloadPeriod)
		info.ClientCA = ca
	}
	if opts.RequestHeaderCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("request-header", opts.RequestHeaderCAFile)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("apiserver: requestheader CA: %w", err)
		}
		go reloadEvery(ctx, ca, reloadPeriod)
		info.RequestHeaderCA = ca
		info.RequestHeaderAllowedNames = headerrequest.StaticStringSlice(opts.RequestHeaderAllowedNames)
		info.RequestHeaderUsernameHeaders = requestHeaderUsernameHeaders
		info.RequestHeaderUIDHeaders = requestHeaderUIDHeaders
		info.RequestHeaderGroupHeaders = requestHeaderGroupHeaders
		info.RequestHeaderExtraHeaderPrefixes = requestHeaderExtraPrefixes
	}
	c := clusterauthenticationtrust.NewClusterAuthenticationTrustController(info, opts.Client)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 1)
	}()
	go func() {
		<-stop
		cancel()
	}()
	return func() { cancel(); <-done }, nil
}

// reloadPeriod is how often reloadEvery reads the files again: upstream's
// own fallback when its file watch fails.
const reloadPeriod = time.Minute

// reloadEvery reads c's files again every period until ctx ends, and
// tells c's listeners when they changed. Upstream's Run notices a change
// at once, through an inotify instance of its own; a host runs hundreds
// of tenants and a user has 128 instances (fs.inotify.max_user_instances)
// by default, so these files, which change when a certificate is
// renewed, are read again instead.
func reloadEvery(ctx context.Context, c interface{ RunOnce(context.Context) error }, period time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.RunOnce(ctx); err != nil {
			klog.ErrorS(err, "reading a certificate file again")
		}
	}, period)
}
