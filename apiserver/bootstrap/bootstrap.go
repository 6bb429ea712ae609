package bootstrap

import (
	"context"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	clientset "k8s.io/client-go/kubernetes"
)

// Run creates what a fresh cluster has: the system namespaces, the
// system priority classes, the default ServiceCIDR, flow control's
// default priority levels and flow schemas, the legacy-token tracking
// ConfigMap and Kubernetes' bootstrap RBAC policy
// (reconciled at every start), and repairs stored Services that lack the
// addresses every Service is created with (servicerepair.go). It is
// idempotent.
func Run(ctx context.Context, c *Cluster) error {
	r, _ := c.Registry.Lookup(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	st := c.Storages[r]
	for _, name := range registry.SystemNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID(uuid.NewString()), CreationTimestamp: metav1.NewTime(time.Now().Truncate(time.Second)),
		}}
		scheme.Default(ns)
		r.PrepareForCreate(ns)
		if err := st.Create(ctx, r.Key("", name), ns, &corev1.Namespace{}, 0); err != nil && !k8sstorage.IsExist(err) {
			return err
		}
	}
	cs, err := clientset.NewForConfig(c.Loopback)
	if err != nil {
		return err
	}
	// The rest is independent: made side by side, so that the store
	// commits the writes together.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ensureSystemPriorityClasses(gctx, cs) })
	g.Go(func() error { return ensureDefaultServiceCIDR(gctx, cs, c.ServiceClusterIPRange) })
	g.Go(func() error { return ensureFlowControlDefaults(gctx, cs) })
	g.Go(func() error { return ensureLegacyTokenTracking(gctx, cs) })
	g.Go(func() error { return reconcileRBAC(gctx, cs) })
	if err := g.Wait(); err != nil {
		return err
	}
	repairServices(ctx, c)
	return nil
}
