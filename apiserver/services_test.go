package apiserver_test

import (
	"context"
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestServices_Allocation: services get distinct cluster IPs from the
// service range and node ports from the node port range; a taken IP is
// refused, a deleted service's IP and ports are free again, updates keep
// the IP and cannot change it, headless services get none.
func TestServices_Allocation(t *testing.T) {
	ctx := context.Background()
	svcs := kubernetes.NewForConfigOrDie(newServer(t)).CoreV1().Services("default")
	port := []corev1.ServicePort{{Name: "http", Port: 80}}
	create := func(name string, spec corev1.ServiceSpec) (*corev1.Service, error) {
		return svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	}
	_, serviceNet, _ := net.ParseCIDR("10.96.0.0/12")
	a, err := create("a", corev1.ServiceSpec{Ports: port})
	if err != nil {
		t.Fatal(err)
	}
	b, err := create("b", corev1.ServiceSpec{Ports: port, Type: corev1.ServiceTypeNodePort})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Service{a, b} {
		if ip := net.ParseIP(s.Spec.ClusterIP); ip == nil || !serviceNet.Contains(ip) || len(s.Spec.ClusterIPs) != 1 {
			t.Fatalf("%s: cluster IP %q (%v)", s.Name, s.Spec.ClusterIP, s.Spec.ClusterIPs)
		}
	}
	if a.Spec.ClusterIP == b.Spec.ClusterIP {
		t.Fatalf("both services got %s", a.Spec.ClusterIP)
	}
	if a.Spec.Type != corev1.ServiceTypeClusterIP || a.Spec.Ports[0].Protocol != corev1.ProtocolTCP || a.Spec.Ports[0].TargetPort.IntVal != 80 {
		t.Fatalf("defaults: %+v", a.Spec)
	}
	if np := b.Spec.Ports[0].NodePort; np < 30000 || np > 32767 {
		t.Fatalf("node port %d", np)
	}

	if _, err := create("c", corev1.ServiceSpec{Ports: port, ClusterIP: a.Spec.ClusterIP}); !apierrors.IsInvalid(err) {
		t.Fatalf("a taken cluster IP: got %v, want Invalid", err)
	}
	if _, err := create("d", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Port: 80, NodePort: b.Spec.Ports[0].NodePort}}}); !apierrors.IsInvalid(err) {
		t.Fatalf("a taken node port: got %v, want Invalid", err)
	}
	headless, err := create("h", corev1.ServiceSpec{Ports: port, ClusterIP: corev1.ClusterIPNone})
	if err != nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("headless: %v %q", err, headless.Spec.ClusterIP)
	}

	// An update without the IP keeps it; changing it is refused.
	a.Spec.ClusterIP, a.Spec.ClusterIPs = "", nil
	a.Spec.Selector = map[string]string{"app": "a"}
	updated, err := svcs.Update(ctx, a, metav1.UpdateOptions{})
	if err != nil || updated.Spec.ClusterIP == "" {
		t.Fatalf("update: %v %q", err, updated.Spec.ClusterIP)
	}
	updated.Spec.ClusterIP, updated.Spec.ClusterIPs = b.Spec.ClusterIP, []string{b.Spec.ClusterIP}
	if _, err := svcs.Update(ctx, updated, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("changing the cluster IP: got %v, want Invalid", err)
	}

	// Deleting frees the IP and node port.
	if err := svcs.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again, err := create("b2", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: b.Spec.ClusterIP,
		Ports: []corev1.ServicePort{{Port: 80, NodePort: b.Spec.Ports[0].NodePort}}})
	if err != nil {
		t.Fatalf("re-using a deleted service's IP and port: %v", err)
	}
	if again.Spec.ClusterIP != b.Spec.ClusterIP {
		t.Fatalf("got %s, want %s", again.Spec.ClusterIP, b.Spec.ClusterIP)
	}
}
