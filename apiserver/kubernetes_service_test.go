package apiserver_test

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/bootstrap"
)

// runKubernetesService runs the reconciler for a server advertising
// 192.0.2.10 until the returned stop is called (or the test ends).
func runKubernetesService(t *testing.T, api *apiserver.Server, port int) (stop func()) {
	t.Helper()
	return runKubernetesServiceAt(t, api, net.ParseIP("192.0.2.10"), port)
}

// runKubernetesServiceAt is runKubernetesService advertising address.
func runKubernetesServiceAt(t *testing.T, api *apiserver.Server, address net.IP, port int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		api.RunKubernetesService(ctx, bootstrap.KubernetesServiceOptions{Address: address, Port: port, Interval: 50 * time.Millisecond})
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds (10s at most).
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestKubernetesService: the kubernetes service gets the first IP of the
// range, port 443 to the secure port, and Endpoints and an EndpointSlice
// at the advertised address; no other service can take that IP; it is
// recreated when deleted and follows a port change.
func TestKubernetesService(t *testing.T) {
	// A /29 has six addresses: the first is the kubernetes service's.
	cfg, api := newServerWith(t, apiserver.Config{ServiceClusterIPRange: "10.0.0.0/29"})
	cs := kubernetes.NewForConfigOrDie(cfg)
	svcs := cs.CoreV1().Services("default")
	stop := runKubernetesService(t, api, 6443)

	var svc *corev1.Service
	waitFor(t, "the kubernetes service", func(ctx context.Context) (bool, error) {
		var err error
		svc, err = svcs.Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil, nil
	})
	if svc.Spec.ClusterIP != "10.0.0.1" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "https" || svc.Spec.Ports[0].Port != 443 ||
		svc.Spec.Ports[0].TargetPort.IntValue() != 6443 || svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Fatalf("kubernetes service: %+v", svc.Spec)
	}
	checkEndpoints := func(port int32) {
		t.Helper()
		waitFor(t, "the kubernetes endpoints", func(ctx context.Context) (bool, error) {
			ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			if err != nil || len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || len(ep.Subsets[0].Ports) != 1 {
				return false, nil
			}
			return ep.Subsets[0].Addresses[0].IP == "192.0.2.10" && ep.Subsets[0].Ports[0].Port == port && ep.Subsets[0].Ports[0].Name == "https", nil
		})
		waitFor(t, "the kubernetes endpointslice", func(ctx context.Context) (bool, error) {
			s, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			if err != nil || len(s.Endpoints) != 1 || len(s.Ports) != 1 || s.Ports[0].Port == nil {
				return false, nil
			}
			return s.Labels[discoveryv1.LabelServiceName] == "kubernetes" && s.Endpoints[0].Addresses[0] == "192.0.2.10" && *s.Ports[0].Port == port, nil
		})
	}
	checkEndpoints(6443)

	// The first IP is not for others, asked for or not: five services fill
	// the rest of the range.
	port := []corev1.ServicePort{{Port: 80}}
	if _, err := svcs.Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "thief"}, Spec: corev1.ServiceSpec{Ports: port, ClusterIP: "10.0.0.1"}}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("asking for the kubernetes service's IP: got %v, want Invalid", err)
	}
	for i := range 5 {
		s, err := svcs.Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{GenerateName: "s-"}, Spec: corev1.ServiceSpec{Ports: port}}, metav1.CreateOptions{})
		if err != nil || s.Spec.ClusterIP == "10.0.0.1" {
			t.Fatalf("service %d: %v, IP %s", i, err, s.Spec.ClusterIP)
		}
	}
	if _, err := svcs.Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "full"}, Spec: corev1.ServiceSpec{Ports: port}}, metav1.CreateOptions{}); err == nil {
		t.Fatal("a seventh address from a /29")
	}

	// Deleted, it comes back with its IP.
	if err := svcs.Delete(context.Background(), "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the kubernetes service to be recreated", func(ctx context.Context) (bool, error) {
		s, err := svcs.Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil && s.UID != svc.UID && s.Spec.ClusterIP == "10.0.0.1", nil
	})

	// A server on another port updates the service and endpoints.
	stop()
	runKubernetesService(t, api, 7443)
	waitFor(t, "the new target port", func(ctx context.Context) (bool, error) {
		s, err := svcs.Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil && s.Spec.Ports[0].TargetPort.IntValue() == 7443, nil
	})
	checkEndpoints(7443)
}

// TestKubernetesService_NoLoopback: the endpoints never name a loopback
// address: a server that advertises one (or none) keeps the service but
// is not listed, and an older server's loopback lease key is skipped.
func TestKubernetesService_NoLoopback(t *testing.T) {
	client := newStorage(t)
	cfg, api := serveAPIWith(t, apiserver.Config{Client: client, ServiceClusterIPRange: "10.0.0.0/29"})
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := client.KV.Put(ctx, "/registry/masterleases/127.0.0.1", "6443"); err != nil {
		t.Fatal(err)
	}
	runKubernetesServiceAt(t, api, net.ParseIP("127.0.0.1"), 6443)
	runKubernetesServiceAt(t, api, nil, 6443)

	// Alone, the loopback and address-less servers make the service and
	// empty endpoints.
	waitFor(t, "the kubernetes service and empty endpoints", func(ctx context.Context) (bool, error) {
		if _, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil && len(ep.Subsets) == 0 && len(s.Endpoints) == 0, nil
	})
	leases, err := client.KV.Get(ctx, "/registry/masterleases/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Kvs) != 1 {
		t.Fatalf("%d lease keys, want only the stale one the test wrote", len(leases.Kvs))
	}

	// A server with a routable address is the one endpoint.
	runKubernetesServiceAt(t, api, net.ParseIP("192.0.2.10"), 6443)
	waitFor(t, "the routable server alone in the endpoints", func(ctx context.Context) (bool, error) {
		ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil || len(ep.Subsets) != 1 {
			return false, nil
		}
		s, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil || len(s.Endpoints) != 1 {
			return false, nil
		}
		a := ep.Subsets[0].Addresses
		return len(a) == 1 && a[0].IP == "192.0.2.10" && s.Endpoints[0].Addresses[0] == "192.0.2.10", nil
	})
}

// TestKubernetesService_IdleWritesNothing: once the service, its
// endpoints and the lease key are as they should be, a reconcile keeps
// the lease alive and writes nothing (no new revision).
func TestKubernetesService_IdleWritesNothing(t *testing.T) {
	client := newStorage(t)
	cfg, api := serveAPIWith(t, apiserver.Config{Client: client, ServiceClusterIPRange: "10.0.0.0/29"})
	cs := kubernetes.NewForConfigOrDie(cfg)
	runKubernetesService(t, api, 6443) // every 50 ms
	waitFor(t, "the kubernetes endpointslice", func(ctx context.Context) (bool, error) {
		s, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil && len(s.Endpoints) == 1, nil
	})
	ctx := context.Background()
	revision := func() int64 {
		t.Helper()
		resp, err := client.KV.Get(ctx, "/registry/masterleases/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
			t.Fatalf("lease keys %v, want this server's, on a lease", resp.Kvs)
		}
		return resp.Header.Revision
	}
	before := revision()
	time.Sleep(time.Second) // about 20 reconciles
	if after := revision(); after != before {
		t.Errorf("idle reconciles wrote revisions %d to %d", before+1, after)
	}
	// They did run: the key's lease, 5 s long, is still fresh.
	leases, err := client.Leases(ctx)
	if err != nil || len(leases.Leases) != 1 {
		t.Fatalf("leases %v, %v; want the server's one", leases, err)
	}
	ttl, err := client.TimeToLive(ctx, leases.Leases[0].ID)
	if err != nil || ttl.TTL < 4 {
		t.Errorf("the lease's TTL is %v s (%v), want it renewed to about 5 s", ttl.TTL, err)
	}
}
