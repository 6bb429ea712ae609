package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestClusterDNS: `sqlkube server` answers the cluster's names on its DNS
// port (Services, a headless Service's pod by hostname and subdomain, SRV
// for named ports, reverse names, pods by address), forwards other names
// upstream, forgets a deleted Service, and keeps kube-system/kube-dns at
// the tenth service address with itself (at the host's address) as the
// endpoint.
func TestClusterDNS(t *testing.T) {
	upstream := startUpstreamDNS(t, "outside.example.", "192.0.2.53")
	port := freeDNSPort(t)
	s := startCommand(t, t.TempDir(), "server", "--fake-nodes", "1",
		"--cluster-dns-port", strconv.Itoa(port), "--cluster-dns-upstream", upstream)
	cs := kubernetes.NewForConfigOrDie(s.restConfig(t, s.kubeconfig))
	ctx := context.Background()

	// The kube-dns EndpointSlice names this server's DNS: the host's
	// address (it advertises 127.0.0.1, which may not be an endpoint)
	// and the port it was given. The queries below go there.
	var dnsAddr string
	until(t, commandTimeout, "the kube-dns EndpointSlice listing this server", func() (bool, error) {
		eps, err := cs.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kube-dns"})
		if err != nil {
			return false, err
		}
		if len(eps.Items) != 1 || len(eps.Items[0].Endpoints) != 1 || len(eps.Items[0].Endpoints[0].Addresses) != 1 ||
			len(eps.Items[0].Ports) != 2 || *eps.Items[0].Ports[0].Port != int32(port) || *eps.Items[0].Ports[1].Port != int32(port) {
			return false, fmt.Errorf("slices %+v", eps.Items)
		}
		ip := net.ParseIP(eps.Items[0].Endpoints[0].Addresses[0])
		if ip == nil || ip.IsLoopback() {
			return false, fmt.Errorf("endpoint address %v", eps.Items[0].Endpoints[0].Addresses)
		}
		dnsAddr = net.JoinHostPort(ip.String(), strconv.Itoa(port))
		return true, nil
	})

	waitAnswer(t, dnsAddr, "kubernetes.default.svc.cluster.local.", dns.TypeA, "10.96.0.1")
	// The same over TCP (the Service's dns-tcp port).
	if got, err := lookup("tcp", dnsAddr, "kubernetes.default.svc.cluster.local.", dns.TypeA); err != nil || !slices.Equal(got, []string{"10.96.0.1"}) {
		t.Fatalf("over TCP: %v, %v", got, err)
	}
	waitAnswer(t, dnsAddr, "1.0.96.10.in-addr.arpa.", dns.TypePTR, "kubernetes.default.svc.cluster.local.")
	waitAnswer(t, dnsAddr, "outside.example.", dns.TypeA, "192.0.2.53")
	waitAnswer(t, dnsAddr, "10-42-7-9.default.pod.cluster.local.", dns.TypeA, "10.42.7.9")

	const ns = "dns-e2e"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port80 := []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "api"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "api"}, Ports: port80},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, dnsAddr, "api."+ns+".svc.cluster.local.", dns.TypeA, svc.Spec.ClusterIP)
	waitAnswer(t, dnsAddr, "_http._tcp.api."+ns+".svc.cluster.local.", dns.TypeSRV, "0 100 80 api."+ns+".svc.cluster.local.")

	// A StatefulSet's pod as its controller makes it: hostname and
	// subdomain naming the headless Service.
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "web"}, Ports: port80},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Hostname: "web-0", Subdomain: "web", NodeName: "fake-0",
			Containers: []corev1.Container{{Name: "web", Image: "nginx", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}},
		},
	}
	// The namespace's default service account comes from a controller.
	until(t, commandTimeout, "pod web-0 created", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, err
	})
	var podIP string
	until(t, commandTimeout, "pod web-0 running with an IP", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		podIP = p.Status.PodIP
		return podIP != "", nil
	})
	waitAnswer(t, dnsAddr, "web-0.web."+ns+".svc.cluster.local.", dns.TypeA, podIP)
	waitAnswer(t, dnsAddr, "web."+ns+".svc.cluster.local.", dns.TypeA, podIP)
	waitAnswer(t, dnsAddr, "_http._tcp.web."+ns+".svc.cluster.local.", dns.TypeSRV, "0 100 80 web-0.web."+ns+".svc.cluster.local.")

	if err := cs.CoreV1().Services(ns).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, commandTimeout, "the deleted Service's name gone", func() (bool, error) {
		got, err := lookup("udp", dnsAddr, "api."+ns+".svc.cluster.local.", dns.TypeA)
		return err == nil && len(got) == 0, fmt.Errorf("answer %v, error %v", got, err)
	})

	dnsSvc, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dnsSvc.Spec.ClusterIP != "10.96.0.10" || dnsSvc.Labels["k8s-app"] != "kube-dns" {
		t.Fatalf("kube-dns: cluster IP %s, labels %v", dnsSvc.Spec.ClusterIP, dnsSvc.Labels)
	}
	t.Run("kubectl", func(t *testing.T) {
		for _, bin := range kubectls(t) {
			out := s.mustKubectl(t, bin, "-n", "kube-system", "get", "svc", "kube-dns", "--no-headers")
			if f := strings.Fields(out); len(f) < 5 || f[0] != "kube-dns" || f[1] != "ClusterIP" || f[2] != "10.96.0.10" || f[4] != "53/UDP,53/TCP" {
				t.Fatalf("kubectl get svc kube-dns: %q", out)
			}
		}
	})
}

// lookup asks addr for name over network (udp or tcp) and returns the
// answers' data (an address, a PTR target, or "priority weight port
// target" of an SRV); an NXDOMAIN is no answers.
func lookup(network, addr, name string, qtype uint16) ([]string, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("%s: rcode %s", name, dns.RcodeToString[r.Rcode])
	}
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.PTR:
			out = append(out, rr.Ptr)
		case *dns.SRV:
			out = append(out, fmt.Sprintf("%d %d %d %s", rr.Priority, rr.Weight, rr.Port, rr.Target))
		}
	}
	return out, nil
}

// waitAnswer waits until addr answers name with exactly want.
func waitAnswer(t *testing.T, addr, name string, qtype uint16, want ...string) {
	t.Helper()
	until(t, commandTimeout, fmt.Sprintf("%s %s answered %v", dns.TypeToString[qtype], name, want), func() (bool, error) {
		got, err := lookup("udp", addr, name, qtype)
		if err != nil {
			return false, err
		}
		return slices.Equal(got, want), fmt.Errorf("answer %v", got)
	})
}

// freeDNSPort is a port free on every address for both UDP and TCP.
func freeDNSPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", ":"+strconv.Itoa(port))
		l.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP")
	return 0
}

// startUpstreamDNS serves name → ip (and NXDOMAIN for anything else) on a
// UDP port of 127.0.0.1, until the test ends; it returns the address.
func startUpstreamDNS(t *testing.T, name, ip string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 && r.Question[0].Name == name && r.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(ip)})
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}
