// Package namespace is the namespace controller: when a namespace is
// deleted (deletionTimestamp set, the "kubernetes" spec finalizer still
// there), it deletes everything in it, of every namespaced resource the
// API server's discovery lists (custom resources included), and then
// removes the finalizer, after which the API server removes the
// namespace. It talks to the API only through client-go.
package namespace

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Options configure a Controller.
type Options struct {
	// Client reads, finalizes and deletes namespaces and discovers the
	// served resources.
	Client kubernetes.Interface
	// Metadata lists and deletes the content of namespaces, of any type.
	Metadata metadata.Interface
	// Namespaces is the informer the controller learns of deletions from.
	Namespaces coreinformers.NamespaceInformer
	// Discover returns the namespaced resources to empty (default:
	// discovery.ServerPreferredNamespacedResources over Client). It may
	// return partial results with an error, as discovery does when some
	// groups fail.
	Discover func() ([]*metav1.APIResourceList, error)
	// RemainingDelay is how long to wait before looking again at a
	// namespace whose content is still going (finalizers, grace periods);
	// default 15s, Kubernetes' estimate.
	RemainingDelay time.Duration
}

// Controller empties and finalizes deleted namespaces.
type Controller struct {
	opts   Options
	lister corelisters.NamespaceLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New builds a controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Metadata == nil || opts.Namespaces == nil {
		return nil, fmt.Errorf("namespace controller: a client, a metadata client and a namespace informer are required")
	}
	if opts.Discover == nil {
		d := opts.Client.Discovery()
		opts.Discover = func() ([]*metav1.APIResourceList, error) { return discovery.ServerPreferredNamespacedResources(d) }
	}
	if opts.RemainingDelay <= 0 {
		opts.RemainingDelay = 15 * time.Second
	}
	c := &Controller{
		opts:   opts,
		lister: opts.Namespaces.Lister(),
		synced: opts.Namespaces.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 60*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "namespace"}),
	}
	enqueue := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp != nil {
			c.queue.Add(ns.Name)
		}
	}
	_, err := opts.Namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the informer's cache, then runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForNamedCacheSync("namespace", ctx.Done(), c.synced) {
		return
	}
	for range workers {
		go wait.UntilWithContext(ctx, c.work, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) work(ctx context.Context) {
	for c.next(ctx) {
	}
}

// next syncs one queued namespace: content still going is looked at again
// after RemainingDelay (or the pods' grace period), errors with backoff.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.Sync(ctx, key)
	var remaining *RemainingError
	switch {
	case err == nil:
		c.queue.Forget(key)
	case asRemaining(err, &remaining):
		c.queue.Forget(key)
		c.queue.AddAfter(key, remaining.Wait)
	default:
		klog.FromContext(ctx).Error(err, "deleting namespace content", "namespace", key)
		c.queue.AddRateLimited(key)
	}
	return true
}

// Sync reconciles one namespace by name: nothing unless it is being
// deleted and still holds the "kubernetes" finalizer; then its content is
// deleted and, once none is left, the finalizer removed and the namespace
// deleted. A *RemainingError says content is still going.
func (c *Controller) Sync(ctx context.Context, name string) error {
	cached, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cached.DeletionTimestamp == nil {
		return nil
	}
	// The cache may lag: work from the API's copy.
	ns, err := c.opts.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp == nil || !hasFinalizer(ns) {
		return nil
	}
	if ns.Status.Phase != corev1.NamespaceTerminating {
		ns.Status.Phase = corev1.NamespaceTerminating
		if ns, err = c.opts.Client.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if err := c.deleteContent(ctx, ns); err != nil {
		return err
	}
	return c.finalize(ctx, name)
}

func hasFinalizer(ns *corev1.Namespace) bool {
	for _, f := range ns.Spec.Finalizers {
		if f == corev1.FinalizerKubernetes {
			return true
		}
	}
	return false
}
