package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The kube-dns Service, as kubeadm names and labels it.
const (
	ServiceName = "kube-dns"
	// ServicePort is the port pods ask (the servers' own port is the
	// endpoints' target port).
	ServicePort = 53
	// managedBy marks the EndpointSlices and Leases kept here (the
	// endpoint slice controller leaves such slices alone).
	managedBy = "cluster-dns.sqlkube.io"
	// leaseLabel marks each server's Lease in kube-system.
	leaseLabel = "sqlkube.io/cluster-dns-server"
)

// serviceLabels are kubeadm's labels of the kube-dns Service.
func serviceLabels() map[string]string {
	return map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}
}

// ServiceIP is the kube-dns Service's cluster IP in an IPv4 service
// range: its tenth address, as kubeadm's.
func ServiceIP(serviceRange string) (net.IP, error) {
	_, network, err := net.ParseCIDR(serviceRange)
	if err != nil || network.IP.To4() == nil {
		return nil, fmt.Errorf("invalid IPv4 service cluster IP range %q", serviceRange)
	}
	ones, bits := network.Mask.Size()
	if bits-ones < 4 {
		return nil, fmt.Errorf("service cluster IP range %q is too small for the DNS service's address (the tenth)", serviceRange)
	}
	n := new(big.Int).Add(new(big.Int).SetBytes(network.IP.To4()), big.NewInt(10)).Bytes()
	ip := make(net.IP, 4)
	copy(ip[4-len(n):], n)
	return ip, nil
}

// ServiceOptions say which DNS server this is.
type ServiceOptions struct {
	// ClusterIP is the Service's address.
	ClusterIP net.IP
	// Address and Port are where this server answers DNS.
	Address net.IP
	Port    int
	// Interval between reconciles (default 10 s); a server that has not
	// renewed its Lease for three intervals is left out.
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// RunService creates the kube-dns Service and keeps it and its
// EndpointSlices (and Endpoints) until ctx ends: every server that
// renewed its Lease (kube-system/kube-dns-ADDRESS-PORT) lately is an
// endpoint, with its own port as the target of port 53 (UDP dns, TCP
// dns-tcp). When ctx ends this server's Lease goes and the endpoints
// are written without it. Errors are logged and retried at the next
// interval.
func RunService(ctx context.Context, cs kubernetes.Interface, o ServiceOptions, log zerolog.Logger) {
	r := newServiceReconciler(cs, o)
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		if err := r.reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("reconciling the kube-dns service")
		}
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := r.leave(sctx); err != nil {
				log.Warn().Err(err).Msg("leaving the kube-dns endpoints")
			}
			return
		case <-t.C:
		}
	}
}

type serviceReconciler struct {
	cs   kubernetes.Interface
	opts ServiceOptions
}

func newServiceReconciler(cs kubernetes.Interface, o ServiceOptions) *serviceReconciler {
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &serviceReconciler{cs: cs, opts: o}
}

// endpoint is one server's DNS address.
type endpoint struct {
	ip   string
	port int
}

func (e endpoint) String() string { return net.JoinHostPort(e.ip, strconv.Itoa(e.port)) }

func (r *serviceReconciler) self() endpoint {
	return endpoint{ip: r.opts.Address.String(), port: r.opts.Port}
}

// leaseName names a server's Lease after its address and port.
func leaseName(e endpoint) string {
	return ServiceName + "-" + strings.NewReplacer(".", "-", ":", "-").Replace(e.ip) + "-" + strconv.Itoa(e.port)
}

func (r *serviceReconciler) reconcile(ctx context.Context) error {
	live, err := r.renewLease(ctx)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	if err := r.service(ctx); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	return r.endpoints(ctx, live)
}

// leave deletes this server's Lease and writes the endpoints without it.
func (r *serviceReconciler) leave(ctx context.Context) error {
	err := r.cs.CoordinationV1().Leases(metav1.NamespaceSystem).Delete(ctx, leaseName(r.self()), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	live, err := r.liveEndpoints(ctx, false)
	if err != nil {
		return err
	}
	return r.endpoints(ctx, live)
}

// renewLease keeps this server's Lease and returns every live server's
// endpoint, sorted.
func (r *serviceReconciler) renewLease(ctx context.Context) ([]endpoint, error) {
	leases := r.cs.CoordinationV1().Leases(metav1.NamespaceSystem)
	self := r.self()
	now := metav1.NewMicroTime(r.opts.Now())
	duration := int32(max(3*r.opts.Interval/time.Second, 5))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName(self), Namespace: metav1.NamespaceSystem, Labels: map[string]string{leaseLabel: "true"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(self.String()), LeaseDurationSeconds: ptr.To(duration),
			AcquireTime: &now, RenewTime: &now,
		},
	}
	cur, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	case err == nil:
		cur.Labels, cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds, cur.Spec.RenewTime = lease.Labels, lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, &now
		_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, err
	}
	return r.liveEndpoints(ctx, true)
}

// liveEndpoints lists the servers' Leases and returns the endpoints of
// those renewed within their duration, sorted, deleting the others. With
// withSelf, this server is among them even if the list missed it.
func (r *serviceReconciler) liveEndpoints(ctx context.Context, withSelf bool) ([]endpoint, error) {
	leases := r.cs.CoordinationV1().Leases(metav1.NamespaceSystem)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{leaseLabel: "true"}.String()})
	if err != nil {
		return nil, err
	}
	self := r.self()
	var live []endpoint
	if withSelf {
		live = append(live, self)
	}
	now := r.opts.Now()
	for _, l := range list.Items {
		e, ok := parseHolder(ptr.Deref(l.Spec.HolderIdentity, ""))
		if !ok || e == self {
			continue
		}
		if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil ||
			now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second)) {
			// Expired: that server stopped without leaving.
			_ = leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
			continue
		}
		live = append(live, e)
	}
	slices.SortFunc(live, func(a, b endpoint) int {
		if c := strings.Compare(a.ip, b.ip); c != 0 {
			return c
		}
		return a.port - b.port
	})
	return live, nil
}

func parseHolder(s string) (endpoint, bool) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || net.ParseIP(host) == nil {
		return endpoint{}, false
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return endpoint{}, false
	}
	return endpoint{ip: net.ParseIP(host).String(), port: p}, true
}

func servicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: ServicePort},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: ServicePort},
	}
}

// service creates the Service without a selector (its endpoints are
// written here), or puts its ports back. Its cluster IP is only chosen
// at creation.
func (r *serviceReconciler) service(ctx context.Context) error {
	services := r.cs.CoreV1().Services(metav1.NamespaceSystem)
	cur, err := services.Get(ctx, ServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ip := r.opts.ClusterIP.String()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: metav1.NamespaceSystem, Labels: serviceLabels()},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, Ports: servicePorts(),
			},
		}
		_, err = services.Create(ctx, svc, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if !samePorts(cur.Spec.Ports, servicePorts()) || cur.Spec.Selector != nil {
		cur.Spec.Ports, cur.Spec.Selector = servicePorts(), nil
		_, err = services.Update(ctx, cur, metav1.UpdateOptions{})
	}
	return err
}

// samePorts compares what servicePorts sets (the API server fills in
// target ports).
func samePorts(got, want []corev1.ServicePort) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Name != want[i].Name || got[i].Protocol != want[i].Protocol || got[i].Port != want[i].Port {
			return false
		}
	}
	return true
}

// endpoints writes one EndpointSlice per target port (kube-dns-PORT:
// servers may listen on different ports), deletes the slices of ports no
// live server has, and writes the Endpoints to match.
func (r *serviceReconciler) endpoints(ctx context.Context, live []endpoint) error {
	byPort := map[int][]string{}
	for _, e := range live {
		byPort[e.port] = append(byPort[e.port], e.ip)
	}
	api := r.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem)
	var errs []error
	want := map[string]bool{}
	for port, ips := range byPort {
		slice := endpointSlice(port, ips)
		want[slice.Name] = true
		errs = append(errs, r.ensureSlice(ctx, slice))
	}
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: managedBy}.String()})
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, s := range list.Items {
			if !want[s.Name] {
				if err := api.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
		}
	}
	errs = append(errs, r.ensureEndpoints(ctx, byPort))
	return errors.Join(errs...)
}

func endpointSlice(port int, ips []string) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: ServiceName + "-" + strconv.Itoa(port), Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: managedBy, "k8s-app": "kube-dns"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(port))},
			{Name: ptr.To("dns-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(port))},
		},
	}
	for _, ip := range ips {
		if net.ParseIP(ip).To4() == nil {
			slice.AddressType = discoveryv1.AddressTypeIPv6 // an IPv6 server (one family per cluster)
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return slice
}

func (r *serviceReconciler) ensureSlice(ctx context.Context, slice *discoveryv1.EndpointSlice) error {
	api := r.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem)
	cur, err := api.Get(ctx, slice.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, slice, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if apiequality.Semantic.DeepEqual(cur.Endpoints, slice.Endpoints) && apiequality.Semantic.DeepEqual(cur.Ports, slice.Ports) &&
		cur.AddressType == slice.AddressType && apiequality.Semantic.DeepEqual(cur.Labels, slice.Labels) {
		return nil
	}
	if cur.AddressType != slice.AddressType { // immutable
		if err := api.Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		_, err = api.Create(ctx, slice, metav1.CreateOptions{})
		return err
	}
	cur.Endpoints, cur.Ports, cur.Labels = slice.Endpoints, slice.Ports, slice.Labels
	_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// ensureEndpoints writes the Endpoints for clients that still read them
// (one subset per port), not mirrored into slices again.
func (r *serviceReconciler) ensureEndpoints(ctx context.Context, byPort map[int][]string) error {
	api := r.cs.CoreV1().Endpoints(metav1.NamespaceSystem)
	var subsets []corev1.EndpointSubset
	ports := make([]int, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, p := range ports {
		s := corev1.EndpointSubset{Ports: []corev1.EndpointPort{
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: int32(p)},
			{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: int32(p)},
		}}
		for _, ip := range byPort[p] {
			s.Addresses = append(s.Addresses, corev1.EndpointAddress{IP: ip})
		}
		subsets = append(subsets, s)
	}
	lbls := map[string]string{discoveryv1.LabelSkipMirror: "true", "k8s-app": "kube-dns"}
	cur, err := api.Get(ctx, ServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: metav1.NamespaceSystem, Labels: lbls}, Subsets: subsets}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if apiequality.Semantic.DeepEqual(cur.Subsets, subsets) && apiequality.Semantic.DeepEqual(cur.Labels, lbls) {
		return nil
	}
	cur.Subsets, cur.Labels = subsets, lbls
	_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}
