// Package serviceaccount is the service accounts controller: every active
// namespace gets the service account "default" (pods that name none run
// as it, and the ServiceAccount admission plugin refuses pods whose
// service account does not exist), and gets it back when it is deleted.
// Namespaces being deleted are left alone. It talks to the API only
// through client-go.
package serviceaccount

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// DefaultName is the service account every namespace gets.
const DefaultName = "default"

// Options configure a Controller.
type Options struct {
	// Client creates service accounts.
	Client kubernetes.Interface
	// Namespaces and ServiceAccounts are the informers the controller
	// learns of new namespaces and deleted service accounts from.
	Namespaces      coreinformers.NamespaceInformer
	ServiceAccounts coreinformers.ServiceAccountInformer
}

// Controller keeps the default service account in every namespace.
type Controller struct {
	client     kubernetes.Interface
	namespaces corelisters.NamespaceLister
	accounts   corelisters.ServiceAccountLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
}

// New builds a controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Namespaces == nil || opts.ServiceAccounts == nil {
		return nil, fmt.Errorf("serviceaccount controller: a client, a namespace and a service account informer are required")
	}
	c := &Controller{
		client:     opts.Client,
		namespaces: opts.Namespaces.Lister(),
		accounts:   opts.ServiceAccounts.Lister(),
		synced:     []cache.InformerSynced{opts.Namespaces.Informer().HasSynced, opts.ServiceAccounts.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceaccount"}),
	}
	enqueueNamespace := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			c.queue.Add(ns.Name)
		}
	}
	if _, err := opts.Namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueNamespace,
		UpdateFunc: func(_, obj any) { enqueueNamespace(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := opts.ServiceAccounts.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if sa, ok := obj.(*corev1.ServiceAccount); ok && sa.Name == DefaultName {
				c.queue.Add(sa.Namespace)
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the informers' caches, then runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForNamedCacheSync("serviceaccount", ctx.Done(), c.synced...) {
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

// next syncs one queued namespace; errors are retried with backoff.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.Sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "creating the default service account", "namespace", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// Sync makes sure the namespace of that name has the default service
// account: nothing if the namespace is gone or terminating, or the
// account is there (in the cache, or already created by someone else).
func (c *Controller) Sync(ctx context.Context, namespace string) error {
	ns, err := c.namespaces.Get(namespace)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		return nil
	}
	if _, err := c.accounts.ServiceAccounts(namespace).Get(DefaultName); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultName}}
	_, err = c.client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil // the namespace started terminating after the cache saw it
	case apierrors.IsNotFound(err):
		return nil // the namespace is gone
	}
	return err
}
