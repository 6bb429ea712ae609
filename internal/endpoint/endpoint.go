// Package endpoint is where an in-process component's own HTTPS endpoint
// listens (kube-controller-manager's 10257, kube-scheduler's 10259: their
// flags) and how it is served; what it serves and who may read it are the
// control plane's (controlplane, apiserver.Server.ComponentHandler).
package endpoint

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	apiserveroptions "k8s.io/apiserver/pkg/server/options"
)

// Address is where a component's endpoint listens and the certificate it
// serves: kube-controller-manager's and kube-scheduler's --bind-address,
// --secure-port, --tls-cert-file and --tls-private-key-file.
type Address struct {
	// BindAddress and Port: no endpoint when Port is 0 (as upstream's
	// --secure-port=0).
	BindAddress string
	Port        int
	// CertFile and KeyFile: the operator's certificate ("": one the
	// cluster's CA signs for the host's names).
	CertFile, KeyFile string
}

// Enabled reports whether the component serves an endpoint.
func (a Address) Enabled() bool { return a.Port != 0 }

func (a Address) String() string { return net.JoinHostPort(a.BindAddress, strconv.Itoa(a.Port)) }

// Flags are the flags of upstream's secure serving options that sqlkube
// takes for an in-process component (the others, --cert-dir, the cipher
// suites, HTTP/2 limits, have no use here).
var Flags = []string{"bind-address", "secure-port", "tls-cert-file", "tls-private-key-file"}

// AddFlags adds Flags from upstream's secure serving flag set to fs.
func AddFlags(fs *pflag.FlagSet, secureServing *pflag.FlagSet) {
	for _, name := range Flags {
		if f := secureServing.Lookup(name); f != nil {
			fs.AddFlag(f)
		}
	}
}

// FromOptions is the Address that upstream's secure serving options say.
func FromOptions(o *apiserveroptions.SecureServingOptions) Address {
	if o == nil {
		return Address{}
	}
	a := Address{Port: o.BindPort, CertFile: o.ServerCert.CertKey.CertFile, KeyFile: o.ServerCert.CertKey.KeyFile}
	if o.BindAddress != nil {
		a.BindAddress = o.BindAddress.String()
	}
	return a
}

// Serve serves h over TLS (tlsConfig: its certificate and the client CAs
// whose certificates it asks for) on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, h http.Handler, tlsConfig *tls.Config) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
	done := make(chan error, 1)
	go func() { done <- hs.ServeTLS(l, "", "") }()
	select {
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-done
	return nil
}
