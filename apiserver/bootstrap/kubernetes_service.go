package bootstrap

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/sqlkube/sqlkube/apiserver/allocator"
	"github.com/sqlkube/sqlkube/apiserver/registry"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/ptr"
)

// The "kubernetes" service in namespace default is how pods find the API:
// cluster IP the first address of the service range, port 443 (https,
// TCP) to the API servers' secure port, and Endpoints and an
// EndpointSlice listing every API server's advertised address. Each API
// server keeps a lease key (/registry/masterleases/IP, an etcd lease of
// three reconcile intervals) so the endpoints are those of the live
// servers, as kube-apiserver's lease endpoint reconciler does. Unlike
// kube-apiserver's, a reconcile that finds everything in place writes
// nothing and reads nothing from the datastore: the lease is kept alive
// (one statement), the lease keys are followed by a watch, and the
// service, Endpoints and EndpointSlice are read from the watch cache.
const (
	kubernetesServiceName = "kubernetes"
	masterLeasePrefix     = "/registry/masterleases/"
)

// KubernetesServiceIP is the kubernetes service's cluster IP in an IPv4
// service range (its first address).
func KubernetesServiceIP(serviceRange string) (net.IP, error) {
	_, network, err := net.ParseCIDR(serviceRange)
	if err != nil || network.IP.To4() == nil {
		return nil, fmt.Errorf("invalid IPv4 service cluster IP range %q", serviceRange)
	}
	return allocator.FirstServiceIP(network), nil
}

// KubernetesServiceOptions say where this API server is reached.
type KubernetesServiceOptions struct {
	// Address is the IP clients reach this server on (its advertised
	// address); Port its secure port. With no Address, or a loopback or
	// unspecified one (which kube-apiserver's validation refuses in
	// endpoints, and which pods could not reach), this server keeps the
	// service but is not among its endpoints.
	Address net.IP
	Port    int
	// Interval between reconciles (default 10s, as kube-apiserver).
	Interval time.Duration
}

// RunKubernetesService creates the kubernetes service, its Endpoints and
// EndpointSlice, and keeps them so until ctx ends: recreated if deleted,
// updated if the port or the set of live API servers changes. Errors are
// logged and retried at the next interval.
func RunKubernetesService(ctx context.Context, c *Cluster, opts KubernetesServiceOptions) {
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if !endpointAddress(opts.Address) {
		if opts.Address != nil {
			c.Logger.Warn().Stringer("address", opts.Address).Msg("the kubernetes service's endpoints may not name a loopback or unspecified address: this server is not among them")
		}
		opts.Address = nil
	}
	k := &kubernetesService{c: c, opts: opts}
	var following sync.WaitGroup
	defer following.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before following.Wait
	following.Go(func() { k.keys.follow(ctx, c.Etcd, c.Logger) })
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	defer func() {
		// Leave the endpoints at once: the other servers drop this
		// address at their next reconcile.
		if k.lease != 0 {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = c.Etcd.Revoke(rctx, k.lease)
		}
	}()
	for {
		if err := k.reconcile(ctx); err != nil && ctx.Err() == nil {
			c.Logger.Warn().Err(err).Msg("reconciling the kubernetes service")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type kubernetesService struct {
	c     *Cluster
	opts  KubernetesServiceOptions
	lease clientv3.LeaseID
	keys  leaseKeys
}

func (k *kubernetesService) reconcile(ctx context.Context) error {
	addrs, err := k.renewLease(ctx)
	if err != nil {
		return fmt.Errorf("master lease: %w", err)
	}
	if err := k.service(ctx); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := k.endpoints(ctx, addrs); err != nil {
		return fmt.Errorf("endpoints: %w", err)
	}
	if err := k.endpointSlice(ctx, addrs); err != nil {
		return fmt.Errorf("endpointslice: %w", err)
	}
	return nil
}

// endpointAddress reports whether ip may be one of the kubernetes
// service's endpoints.
func endpointAddress(ip net.IP) bool {
	return ip != nil && !ip.IsLoopback() && !ip.IsUnspecified()
}

// renewLease keeps this server's lease key alive (when it has an address)
// and returns the addresses of every live API server, sorted; loopback
// ones (an older server's) are left out. While the lease lives and the
// key is as this server wrote it, a reconcile keeps the lease alive and
// reads the keys, and writes nothing.
func (k *kubernetesService) renewLease(ctx context.Context) ([]string, error) {
	c := k.c.Etcd
	if k.opts.Address != nil && k.lease != 0 {
		if _, err := c.KeepAliveOnce(ctx, k.lease); err != nil {
			k.lease = 0 // expired or revoked: a new one below
		}
	}
	kvs, followed := k.keys.snapshot()
	if !followed {
		resp, err := c.Get(ctx, masterLeasePrefix, clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		kvs = resp.Kvs
	}
	var addrs []string
	kept := false
	for _, kv := range kvs {
		addr := string(kv.Key[len(masterLeasePrefix):])
		if k.opts.Address != nil && addr == k.opts.Address.String() {
			kept = k.lease != 0 && clientv3.LeaseID(kv.Lease) == k.lease && string(kv.Value) == strconv.Itoa(k.opts.Port)
			continue // added below
		}
		if endpointAddress(net.ParseIP(addr)) {
			addrs = append(addrs, addr)
		}
	}
	if k.opts.Address != nil {
		if !kept {
			if err := k.putLease(ctx); err != nil {
				return nil, err
			}
		}
		addrs = append(addrs, k.opts.Address.String())
	}
	slices.Sort(addrs)
	return addrs, nil
}

// putLease writes this server's lease key, on a lease kept alive here
// (granted now if there is none).
func (k *kubernetesService) putLease(ctx context.Context) error {
	c := k.c.Etcd
	if k.lease == 0 {
		ttl := int64(max(3*k.opts.Interval/time.Second, 5))
		resp, err := c.Grant(ctx, ttl)
		if err != nil {
			return err
		}
		k.lease = resp.ID
	}
	key, val := masterLeasePrefix+k.opts.Address.String(), strconv.Itoa(k.opts.Port)
	resp, err := c.Put(ctx, key, val, clientv3.WithLease(k.lease))
	if err != nil {
		return err
	}
	k.keys.wrote(&mvccpb.KeyValue{Key: []byte(key), Value: []byte(val), Lease: int64(k.lease), ModRevision: resp.Header.Revision})
	return nil
}

// storageOf returns a resource's registry entry and store.
func (c *Cluster) storageOf(gvr schema.GroupVersionResource) (*registry.Resource, k8sstorage.Interface) {
	r, ok := c.Registry.Lookup(gvr)
	if !ok {
		return nil, nil
	}
	return r, c.Storages[r]
}

// ensure creates obj, or updates the stored one with mutate when it
// reports a change. It looks at the watch cache first, so a reconcile
// that finds the object as it should be sends the datastore nothing; a
// cache that trails the store costs a write that finds nothing to change,
// or a create that finds the object, which the update then takes.
func ensure(ctx context.Context, r *registry.Resource, st k8sstorage.Interface, obj runtime.Object, name string, mutate func(existing runtime.Object) (runtime.Object, bool)) error {
	key := r.Key(metav1.NamespaceDefault, name)
	cur := r.New()
	switch err := st.Get(ctx, key, k8sstorage.GetOptions{ResourceVersion: "0"}, cur); {
	case k8sstorage.IsNotFound(err):
		if err := st.Create(ctx, key, obj, r.New(), 0); !k8sstorage.IsExist(err) {
			return err
		}
	case err != nil:
		return err
	default:
		if _, changed := mutate(cur.DeepCopyObject()); !changed {
			return nil
		}
	}
	return st.GuaranteedUpdate(ctx, key, r.New(), false, nil, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		updated, changed := mutate(existing.DeepCopyObject())
		if !changed {
			return existing, nil, nil // no write
		}
		return updated, nil, nil
	}, nil)
}

func systemMeta(name string, lbls map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: metav1.NamespaceDefault, Labels: lbls,
		UID: types.UID(uuid.NewString()), CreationTimestamp: metav1.NewTime(time.Now().Truncate(time.Second)),
	}
}

func (k *kubernetesService) servicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt(k.opts.Port)}}
}

// service creates the service with the first cluster IP (reserved for it)
// or puts its ports and type back.
func (k *kubernetesService) service(ctx context.Context) error {
	r, st := k.c.storageOf(corev1.SchemeGroupVersion.WithResource("services"))
	if r == nil {
		return nil
	}
	_, network, err := net.ParseCIDR(k.c.ServiceClusterIPRange)
	if err != nil {
		return err
	}
	ip := allocator.FirstServiceIP(network).String()
	existing := &corev1.Service{}
	// From the watch cache: an idle reconcile sends the datastore nothing.
	err = st.Get(ctx, r.Key(metav1.NamespaceDefault, kubernetesServiceName), k8sstorage.GetOptions{ResourceVersion: "0"}, existing)
	if k8sstorage.IsNotFound(err) {
		// Claim the IP (already ours if an earlier create failed).
		if _, err := k.c.ClusterIPs.Allocate(ctx, ip, allocator.KubernetesServiceOwner); err != nil {
			owner, gerr := k.c.Etcd.Get(ctx, k.c.ClusterIPs.Key(ip))
			if gerr != nil || len(owner.Kvs) == 0 || string(owner.Kvs[0].Value) != allocator.KubernetesServiceOwner {
				return fmt.Errorf("cluster IP %s: %w", ip, err)
			}
		}
	} else if err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: systemMeta(kubernetesServiceName, map[string]string{"component": "apiserver", "provider": "kubernetes"}),
		Spec: corev1.ServiceSpec{
			Ports: k.servicePorts(), ClusterIP: ip, ClusterIPs: []string{ip},
			Type: corev1.ServiceTypeClusterIP, SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
	registry.DefaultService(svc)
	return ensure(ctx, r, st, svc, kubernetesServiceName, func(obj runtime.Object) (runtime.Object, bool) {
		cur := obj.(*corev1.Service)
		if apiequality.Semantic.DeepEqual(cur.Spec.Ports, svc.Spec.Ports) && cur.Spec.Type == corev1.ServiceTypeClusterIP {
			return cur, false
		}
		cur.Spec.Ports, cur.Spec.Type = svc.Spec.Ports, corev1.ServiceTypeClusterIP
		return cur, true
	})
}

func (k *kubernetesService) endpoints(ctx context.Context, addrs []string) error {
	r, st := k.c.storageOf(corev1.SchemeGroupVersion.WithResource("endpoints"))
	if r == nil {
		return nil
	}
	subset := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: "https", Port: int32(k.opts.Port), Protocol: corev1.ProtocolTCP}}}
	for _, a := range addrs {
		subset.Addresses = append(subset.Addresses, corev1.EndpointAddress{IP: a})
	}
	ep := &corev1.Endpoints{
		ObjectMeta: systemMeta(kubernetesServiceName, map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}),
	}
	if len(addrs) > 0 { // a subset without addresses is invalid
		ep.Subsets = []corev1.EndpointSubset{subset}
	}
	return ensure(ctx, r, st, ep, kubernetesServiceName, func(obj runtime.Object) (runtime.Object, bool) {
		cur := obj.(*corev1.Endpoints)
		if apiequality.Semantic.DeepEqual(cur.Subsets, ep.Subsets) {
			return cur, false
		}
		cur.Subsets = ep.Subsets
		return cur, true
	})
}

func (k *kubernetesService) endpointSlice(ctx context.Context, addrs []string) error {
	r, st := k.c.storageOf(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"))
	if r == nil {
		return nil
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  systemMeta(kubernetesServiceName, map[string]string{discoveryv1.LabelServiceName: kubernetesServiceName}),
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(k.opts.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return ensure(ctx, r, st, slice, kubernetesServiceName, func(obj runtime.Object) (runtime.Object, bool) {
		cur := obj.(*discoveryv1.EndpointSlice)
		if apiequality.Semantic.DeepEqual(cur.Endpoints, slice.Endpoints) && apiequality.Semantic.DeepEqual(cur.Ports, slice.Ports) && cur.AddressType == slice.AddressType {
			return cur, false
		}
		cur.Endpoints, cur.Ports, cur.AddressType = slice.Endpoints, slice.Ports, slice.AddressType
		return cur, true
	})
}
