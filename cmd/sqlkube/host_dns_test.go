package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/node/fake"
	"github.com/sqlkube/sqlkube/tenant"
)

// TestHost_TenantDNS: a tenant serves cluster DNS on a port of its own
// once it has a node that is not simulated, and the kube-dns Service's
// endpoints send its pods there; a tenant without one serves none.
func TestHost_TenantDNS(t *testing.T) {
	dir := t.TempDir()
	hostCfg, _ := startTestHost(t, dir)
	tenants := dynamic.NewForConfigOrDie(hostCfg).Resource(tenant.GVR)
	ctx := ctxTimeout(t, 3*time.Minute)
	clients := map[string]*kubernetes.Clientset{}
	ports := map[string]int{}
	for _, name := range []string{"a", "b"} {
		kc := filepath.Join(dir, name+".kubeconfig")
		if out, err := tenantCLI(t, dir, "create", name, "--out", kc); err != nil {
			t.Fatalf("tenant create %s: %v\n%s", name, err, out)
		}
		tn, err := getTenant(ctx, tenants, name)
		if err != nil {
			t.Fatal(err)
		}
		if tn.Status.DNSPort <= 0 || tn.Status.DNSPort == tn.Status.Port {
			t.Fatalf("tenant %s: status.dnsPort %d (API port %d)", name, tn.Status.DNSPort, tn.Status.Port)
		}
		clients[name], ports[name] = tenantClient(t, kc), tn.Status.DNSPort
	}
	if ports["a"] == ports["b"] {
		t.Fatalf("both tenants' DNS on port %d", ports["a"])
	}
	a, b := clients["a"], clients["b"]
	// A simulated node is not enough: no kube-dns Service yet.
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	if _, err := a.CoreV1().Nodes().Create(ctx, node("sim", map[string]string{fake.LabelType: fake.LabelTypeValue}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("tenant a's kube-dns Service before it has a real node: %v, want NotFound", err)
	}
	if _, err := a.CoreV1().Nodes().Create(ctx, node("real", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Service's one endpoint is the host's address at a's port.
	var addr string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := a.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kube-dns"})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		s := list.Items[0]
		if len(s.Endpoints) != 1 || len(s.Endpoints[0].Addresses) != 1 || len(s.Ports) == 0 || s.Ports[0].Port == nil {
			return false, nil
		}
		if int(*s.Ports[0].Port) != ports["a"] {
			return false, fmt.Errorf("kube-dns's endpoint port %d, want tenant a's DNS port %d", *s.Ports[0].Port, ports["a"])
		}
		addr = net.JoinHostPort(s.Endpoints[0].Addresses[0], strconv.Itoa(ports["a"]))
		return true, nil
	})
	if err != nil {
		t.Fatalf("tenant a's kube-dns endpoints: %v", err)
	}
	svc, err := a.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != "10.96.0.10" {
		t.Fatalf("tenant a's kube-dns Service: %v %v", svc, err)
	}
	// It answers a's names, over UDP and TCP: a Service of a's only.
	probe := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "only-in-a"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if probe, err = a.CoreV1().Services("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, network := range []string{"udp", "tcp"} {
		for name, want := range map[string]string{
			"kubernetes.default.svc.cluster.local.": "10.96.0.1",
			"only-in-a.default.svc.cluster.local.":  probe.Spec.ClusterIP,
		} {
			var got []string
			err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				got, err = lookupA(network, addr, name)
				return err == nil && slices.Equal(got, []string{want}), nil
			})
			if err != nil {
				t.Fatalf("%s %s at %s: %v %v, want %s", network, name, addr, got, err, want)
			}
		}
	}
	// b has no real node: no DNS of its own, and a's knows none of b's.
	if _, err := b.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("tenant b's kube-dns Service without a real node: %v, want NotFound", err)
	}
	host, _, _ := net.SplitHostPort(addr)
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(ports["b"])), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("tenant b's DNS port %d takes connections without a real node", ports["b"])
	}
}

// lookupA asks addr for name's A records over network.
func lookupA(network, addr, name string) ([]string, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	r, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(m, addr)
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s: rcode %s", name, dns.RcodeToString[r.Rcode])
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out, nil
}
