package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"

	"github.com/sqlkube/sqlkube/controllers/namespace"
)

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
	// Kubernetes' own aggregation controller fills admin, edit, view and
	// any aggregated ClusterRole from the roles its selectors match.
	aggregation := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), cs.RbacV1())
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { ns.Run(ctx, 2) })
	wg.Go(func() { aggregation.Run(ctx, 1) })
	log.Info().Strs("controllers", []string{"namespace", "clusterrole-aggregation"}).Msg("controllers started")
	return func() {
		wg.Wait()
		factory.Shutdown()
	}, nil
}
