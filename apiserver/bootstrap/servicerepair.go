package bootstrap

import (
	"context"
	"fmt"

	"github.com/sqlkube/sqlkube/apiserver/allocator"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// needsAddresses reports whether svc should have cluster IPs and IP
// families and has none: what server-side apply stored before it went
// through the create path (it skipped allocation), which Kubernetes'
// endpoints controller cannot read.
func needsAddresses(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName &&
		(svc.Spec.ClusterIP == "" || len(svc.Spec.ClusterIPs) == 0 || len(svc.Spec.IPFamilies) == 0)
}

// repairServices gives every stored Service that needs addresses and has
// none what a create would have given it (Kubernetes' allocation, as the
// create path runs it: IP families, cluster IP, node ports), written
// straight to storage. A Service whose addresses cannot be had (a node
// port it names is taken, say) is logged and left as it is; nothing here
// stops the server from starting.
func repairServices(ctx context.Context, c *Cluster) {
	r, ok := c.Registry.Lookup(schema.GroupVersionResource{Version: "v1", Resource: "services"})
	if !ok || c.ClusterIPs == nil || c.NodePorts == nil {
		return
	}
	st := c.Storages[r]
	list := &corev1.ServiceList{}
	if err := st.GetList(ctx, r.ListKey(""), k8sstorage.ListOptions{Recursive: true, Predicate: k8sstorage.Everything}, list); err != nil {
		c.Logger.Warn().Err(err).Msg("listing services to repair")
		return
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if !needsAddresses(svc) {
			continue
		}
		log := c.Logger.With().Str("service", svc.Namespace+"/"+svc.Name).Logger()
		if err := repairService(ctx, c, st, r.Key(svc.Namespace, svc.Name), svc); err != nil {
			log.Warn().Err(err).Msg("a stored service has no addresses and could not be given them; served as it is")
			continue
		}
		log.Info().Str("clusterIP", svc.Spec.ClusterIP).Msg("gave a stored service the addresses it lacked")
	}
}

// repairService allocates svc's addresses as a create would and stores
// it, if it is still the version read.
func repairService(ctx context.Context, c *Cluster, st k8sstorage.Interface, key string, svc *corev1.Service) error {
	in := &api.Service{}
	if err := legacyscheme.Scheme.Convert(svc, in, nil); err != nil {
		return err
	}
	hooks, err := allocator.ServiceHooks(ctx, c.ClusterIPs, c.NodePorts, svc.Namespace+"/"+svc.Name)
	if err != nil {
		return err
	}
	stored := false
	if in.Spec.ClusterIP != "" {
		// Addressed (or headless) but without IP families: they follow
		// from what it has, as kube-apiserver fills them on read.
		hooks.Store.Decorator(in)
	} else {
		in.Spec.ClusterIPs = nil // they follow clusterIP, which a create allocates
		finish, err := hooks.Store.BeginCreate(ctx, in, &metav1.CreateOptions{})
		if err != nil {
			return err
		}
		defer func() { finish(ctx, stored) }()
	}
	if err := legacyscheme.Scheme.Convert(in, svc, nil); err != nil {
		return err
	}
	rv := svc.ResourceVersion
	err = st.GuaranteedUpdate(ctx, key, &corev1.Service{}, false, &k8sstorage.Preconditions{ResourceVersion: &rv},
		func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
			if existing.(*corev1.Service).ResourceVersion != rv {
				return nil, nil, fmt.Errorf("changed while being repaired")
			}
			return svc.DeepCopy(), nil, nil
		}, nil)
	stored = err == nil
	return err
}
