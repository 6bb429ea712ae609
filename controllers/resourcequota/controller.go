// Package resourcequota runs Kubernetes' resource quota controller
// (k8s.io/kubernetes/pkg/controller/resourcequota) over client-go: it
// copies each ResourceQuota's spec.hard to status.hard (until it has,
// the ResourceQuota admission plugin does not enforce the quota) and
// recalculates status.used from what the namespace holds, when a quota
// changes, when objects it counts are deleted, and every ResyncPeriod.
// The admission plugin charges creates in between.
package resourcequota

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/kubernetes/pkg/controller"
	quotacontroller "k8s.io/kubernetes/pkg/controller/resourcequota"
	quotainstall "k8s.io/kubernetes/pkg/quota/v1/install"
)

// Options configure a Controller.
type Options struct {
	// Client updates quotas' status and discovers the served resources.
	Client kubernetes.Interface
	// Metadata watches resources that have no typed informer.
	Metadata metadata.Interface
	// Informers is the shared factory the quotas and the counted objects
	// are watched through; the caller starts it after New, before Run.
	Informers informers.SharedInformerFactory
	// ResyncPeriod is how often every quota is recalculated (default
	// 5m, kube-controller-manager's).
	ResyncPeriod time.Duration
	// DiscoveryPeriod is how often new resource types are looked for
	// (default 30s).
	DiscoveryPeriod time.Duration
}

// Controller keeps ResourceQuotas' status.
type Controller struct {
	opts     Options
	inner    *quotacontroller.Controller
	meta     metadatainformer.SharedInformerFactory
	started  chan struct{}
	discover quotacontroller.NamespacedResourcesFunc
}

// New builds the controller; Run starts it.
func New(ctx context.Context, opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Metadata == nil || opts.Informers == nil {
		return nil, fmt.Errorf("resourcequota controller: a client, a metadata client and an informer factory are required")
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = 5 * time.Minute
	}
	if opts.DiscoveryPeriod <= 0 {
		opts.DiscoveryPeriod = 30 * time.Second
	}
	c := &Controller{
		opts:     opts,
		meta:     metadatainformer.NewSharedInformerFactory(opts.Metadata, 0),
		started:  make(chan struct{}),
		discover: opts.Client.Discovery().ServerPreferredNamespacedResources,
	}
	factory := informerfactory.NewInformerFactory(opts.Informers, c.meta)
	config := quotainstall.NewQuotaConfigurationForControllers(generic.ListerFuncForResourceFunc(factory.ForResource))
	inner, err := quotacontroller.NewController(ctx, &quotacontroller.ControllerOptions{
		QuotaClient:               opts.Client.CoreV1(),
		ResourceQuotaInformer:     opts.Informers.Core().V1().ResourceQuotas(),
		ResyncPeriod:              controller.StaticResyncPeriodFunc(opts.ResyncPeriod),
		InformerFactory:           factory,
		ReplenishmentResyncPeriod: controller.StaticResyncPeriodFunc(0),
		DiscoveryFunc:             c.discover,
		IgnoredResourcesFunc:      config.IgnoredResources,
		InformersStarted:          c.started,
		Registry:                  generic.NewRegistry(config.Evaluators()),
		UpdateFilter:              quotainstall.DefaultUpdateFilter(),
	})
	if err != nil {
		return nil, fmt.Errorf("resourcequota controller: %w", err)
	}
	c.inner = inner
	return c, nil
}

// Run starts the informers the controller added, then runs workers and
// the discovery loop until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.opts.Informers.Start(ctx.Done())
	c.meta.Start(ctx.Done())
	close(c.started)
	go c.inner.Sync(ctx, c.discover, c.opts.DiscoveryPeriod)
	c.inner.Run(ctx, workers)
	c.meta.Shutdown()
}
