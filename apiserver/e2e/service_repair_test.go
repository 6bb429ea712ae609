package e2e

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestServer_RepairsServicesWithoutAddresses: a data directory holding
// Services stored without addresses (as server-side apply stored them
// before it went through the create path), written straight into the
// datastore, is served: the server gives them what a create would have
// (IP families, a cluster IP, node ports), the endpoints controller
// reconciles them, and nothing panics.
func TestServer_RepairsServicesWithoutAddresses(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, dir)
	first.mustKubectl(t, "kubectl", "get", "namespace", "default")
	first.stop(t)

	ctx := context.Background()
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: "sqlite://" + filepath.Join(dir, "state.db"), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	codec := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "bare"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}}}},
	} {
		svc.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		svc.Namespace, svc.UID = "default", types.UID("00000000-0000-0000-0000-0000000000"+svc.Name[:2])
		svc.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
		var buf bytes.Buffer
		if err := codec.Encode(svc, &buf); err != nil {
			t.Fatal(err)
		}
		key := "/registry/services/specs/default/" + svc.Name
		if _, _, err := store.Put(ctx, sqlstore.PutRequest{Key: []byte(key), Value: buf.Bytes()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	s := startServer(t, dir)
	cs := s.clientset(t)
	_, serviceNet, _ := net.ParseCIDR("10.96.0.0/12")
	bare, err := cs.CoreV1().Services("default").Get(ctx, "bare", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(bare.Spec.ClusterIP); ip == nil || !serviceNet.Contains(ip) || len(bare.Spec.IPFamilies) != 1 ||
		bare.Spec.IPFamilyPolicy == nil || bare.Spec.Ports[0].NodePort < 30000 {
		t.Fatalf("the stored service was not given addresses: clusterIP %q families %v policy %v node port %d",
			bare.Spec.ClusterIP, bare.Spec.IPFamilies, bare.Spec.IPFamilyPolicy, bare.Spec.Ports[0].NodePort)
	}
	headless, err := cs.CoreV1().Services("default").Get(ctx, "headless", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(headless.Spec.ClusterIPs) != 1 || headless.Spec.ClusterIPs[0] != corev1.ClusterIPNone || len(headless.Spec.IPFamilies) != 1 {
		t.Fatalf("headless service: clusterIPs %v families %v", headless.Spec.ClusterIPs, headless.Spec.IPFamilies)
	}
	// The endpoints controller reconciles both (an Endpoints object per
	// selecting Service), and the server is still up.
	for _, name := range []string{"bare", "headless"} {
		poll(t, "the endpoints of "+name, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Endpoints("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil, err
		})
	}
	// Allocated for real: the cluster IP and node port are taken.
	taken := bare.DeepCopy()
	taken.ObjectMeta = metav1.ObjectMeta{Name: "taken"}
	taken.Spec.ClusterIPs = nil
	if _, err := cs.CoreV1().Services("default").Create(ctx, taken, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "already allocated") {
		t.Fatalf("a service asking for the repaired one's addresses: %v, want already allocated", err)
	}
	// Still serving after the controllers have been at it.
	s.mustKubectl(t, "kubectl", "get", "services", "-A")
	if strings.Contains(s.stderr.String(), "panic") {
		t.Fatalf("the server's log has a panic:\n%s", s.stderr)
	}
}
