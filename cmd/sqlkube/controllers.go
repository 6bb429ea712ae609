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
	"github.com/sqlkube/sqlkube/controllers/resourcequota"
	"github.com/sqlkube/sqlkube/controllers/serviceaccount"
)

// runControllers starts the controllers `sqlkube server` runs in-process
// (namespace, ClusterRole aggregation, service accounts, resource quotas) against cfg until ctx ends; the
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
	// The default service account of every namespace, which the
	// ServiceAccount admission plugin requires of pods.
	accounts, err := serviceaccount.New(serviceaccount.Options{Client: cs, Namespaces: factory.Core().V1().Namespaces(), ServiceAccounts: factory.Core().V1().ServiceAccounts()})
	if err != nil {
		return nil, err
	}
	// ResourceQuotas' status.hard and status.used, which the ResourceQuota
	// admission plugin enforces and charges.
	quotas, err := resourcequota.New(ctx, resourcequota.Options{Client: cs, Metadata: md, Informers: factory})
	if err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { ns.Run(ctx, 2) })
	wg.Go(func() { aggregation.Run(ctx, 1) })
	wg.Go(func() { accounts.Run(ctx, 2) })
	wg.Go(func() { quotas.Run(ctx, 2) })
	log.Info().Strs("controllers", []string{"namespace", "clusterrole-aggregation", "serviceaccount", "resourcequota"}).Msg("controllers started")
	return func() {
		wg.Wait()
		factory.Shutdown()
	}, nil
}
