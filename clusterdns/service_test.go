package clusterdns

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// sliceIPs is every kube-dns EndpointSlice's addresses by slice name.
func sliceIPs(t *testing.T, cs *fake.Clientset) map[string][]string {
	t.Helper()
	list, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			got[s.Name] = append(got[s.Name], e.Addresses...)
		}
		if len(s.Endpoints) == 0 {
			got[s.Name] = nil
		}
	}
	return got
}

func TestServiceReconciler(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	server := func(ip string, port int) *serviceReconciler {
		return newServiceReconciler(cs, ServiceOptions{ClusterIP: net.ParseIP("10.96.0.10"), Address: net.ParseIP(ip), Port: port, Now: clock})
	}
	a, b, c := server("192.0.2.1", 10053), server("192.0.2.2", 10053), server("192.0.2.3", 5353)

	if err := a.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, ServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || svc.Spec.Selector != nil || svc.Labels["k8s-app"] != "kube-dns" ||
		len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Protocol != corev1.ProtocolUDP || svc.Spec.Ports[0].Port != 53 || svc.Spec.Ports[1].Name != "dns-tcp" {
		t.Fatalf("service: %+v", svc)
	}
	if got := sliceIPs(t, cs); len(got) != 1 || !slices.Equal(got["kube-dns-10053"], []string{"192.0.2.1"}) {
		t.Fatalf("after one server: slices %v", got)
	}

	for _, r := range []*serviceReconciler{b, c, a} {
		if err := r.reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := sliceIPs(t, cs)
	if len(got) != 2 || !slices.Equal(got["kube-dns-10053"], []string{"192.0.2.1", "192.0.2.2"}) || !slices.Equal(got["kube-dns-5353"], []string{"192.0.2.3"}) {
		t.Fatalf("after three servers: slices %v", got)
	}
	slice, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Get(ctx, "kube-dns-5353", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(slice.Ports) != 2 || *slice.Ports[0].Port != 5353 || *slice.Ports[0].Protocol != corev1.ProtocolUDP || slice.Labels["kubernetes.io/service-name"] != ServiceName {
		t.Fatalf("slice kube-dns-5353: %+v", slice)
	}
	ep, err := cs.CoreV1().Endpoints(metav1.NamespaceSystem).Get(ctx, ServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Subsets) != 2 || ep.Subsets[0].Ports[0].Port != 5353 || len(ep.Subsets[1].Addresses) != 2 {
		t.Fatalf("endpoints: %+v", ep.Subsets)
	}

	// b leaves; c stops without leaving and its lease runs out.
	if err := b.leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sliceIPs(t, cs); !slices.Equal(got["kube-dns-10053"], []string{"192.0.2.1"}) {
		t.Fatalf("after b left: slices %v", got)
	}
	now = now.Add(20 * time.Second)
	if err := a.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sliceIPs(t, cs); len(got) != 2 {
		t.Fatalf("c's lease is not out yet: slices %v", got)
	}
	now = now.Add(20 * time.Second)
	if err := a.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sliceIPs(t, cs); len(got) != 1 || !slices.Equal(got["kube-dns-10053"], []string{"192.0.2.1"}) {
		t.Fatalf("after c's lease ran out: slices %v", got)
	}
	leases, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 1 || leases.Items[0].Name != "kube-dns-192-0-2-1-10053" {
		t.Fatalf("leases: %+v", leases.Items)
	}

	// The Service's ports are put back; its address stays.
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if _, err := cs.CoreV1().Services(metav1.NamespaceSystem).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if svc, _ = cs.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, ServiceName, metav1.GetOptions{}); len(svc.Spec.Ports) != 2 {
		t.Fatalf("ports not put back: %+v", svc.Spec.Ports)
	}
}
