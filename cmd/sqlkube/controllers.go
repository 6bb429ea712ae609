package main

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/rs/zerolog"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/controllers/namespace"
)

// selfConfig is a client configuration for the server's own API at addr
// (its listener's address; an unspecified IP is reached on 127.0.0.1),
// with the generated admin credentials.
func selfConfig(addr net.Addr, files pki.Files) *rest.Config {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	cfg := &rest.Config{
		Host: "https://" + net.JoinHostPort(host, port),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: files.CACert, CertFile: files.AdminCert, KeyFile: files.AdminKey,
		},
		UserAgent: "sqlkube-controllers",
		QPS:       50, Burst: 100,
	}
	return cfg
}

// runControllers starts the controllers `sqlkube server` runs in-process
// (today the namespace controller) against cfg until ctx ends; the
// returned wait blocks until they have stopped.
func runControllers(ctx context.Context, cfg *rest.Config, log zerolog.Logger) (wait func(), err error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	ns, err := namespace.New(namespace.Options{Client: cs, Metadata: md, Namespaces: factory.Core().V1().Namespaces()})
	if err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { ns.Run(ctx, 2) })
	log.Info().Strs("controllers", []string{"namespace"}).Msg("controllers started")
	return func() {
		wg.Wait()
		factory.Shutdown()
	}, nil
}
