package controlplane

import (
	"context"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/node/fake"
)

// RunFakeNodes runs simulated nodes over cfg until ctx ends.
func RunFakeNodes(ctx context.Context, cfg *rest.Config, opts fake.Options, log zerolog.Logger) error {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sqlkube-fake-node"
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	opts.Client, opts.Logger = cs, log
	sim, err := fake.New(opts)
	if err != nil {
		return err
	}
	return sim.Run(ctx)
}
