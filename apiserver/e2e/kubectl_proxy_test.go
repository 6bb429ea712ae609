package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sqlkube/sqlkube/internal/testcert"
)

// TestKubectl_Proxy: kubectl get --raw reaches a pod, a service and a
// node through pods/proxy, services/proxy and nodes/proxy. The pod is an
// HTTP server in the test process on one of the host's addresses (the
// API server proxies to pods by address, as kube-apiserver does, and
// refuses loopback ones), named by a pod object whose status gives that
// address, by a selectorless service whose Endpoints point at the pod,
// and by a node object with that address.
func TestKubectl_Proxy(t *testing.T) {
	bins := kubectls(t)
	ip := testcert.HostIPv4(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "backend %s %s", r.Method, r.URL.RequestURI())
	})}
	go func() { _ = backend.Serve(ln) }()
	t.Cleanup(func() { _ = backend.Close() })
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	s := startServer(t, t.TempDir())
	cs := s.clientset(t)
	ctx := context.Background()
	// Statuses are patched: the scheduler and the node controllers write
	// them too.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: port}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podStatus := fmt.Sprintf(`{"status":{"podIP":%q,"podIPs":[{"ip":%q}]}}`, ip, ip)
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "web", types.MergePatchType, []byte(podStatus), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "frontend"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(port)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Endpoints("default").Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "frontend"},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: ip, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"}}},
			Ports:     []corev1.EndpointPort{{Name: "http", Port: port}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeStatus := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}}}}`, ip)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "vm", types.MergePatchType, []byte(nodeStatus), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}

	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			for path, want := range map[string]string{
				"/api/v1/namespaces/default/pods/web/proxy/hello?x=1":                       "backend GET /hello?x=1",
				fmt.Sprintf("/api/v1/namespaces/default/pods/web:%d/proxy/a/b/", port):      "backend GET /a/b/",
				"/api/v1/namespaces/default/services/frontend:http/proxy/guestbook?cmd=get": "backend GET /guestbook?cmd=get",
				"/api/v1/namespaces/default/services/frontend:80/proxy/":                    "backend GET /",
				fmt.Sprintf("/api/v1/nodes/vm:%d/proxy/pods", port):                         "backend GET /pods",
			} {
				if got := s.mustKubectl(t, bin, "get", "--raw", path); got != want {
					t.Errorf("get --raw %s: %q, want %q", path, got, want)
				}
			}
		})
	}
}

// TestKubectl_Debug: kubectl debug adds an ephemeral container to a pod
// (a strategic merge patch of pods/ephemeralcontainers), with each
// kubectl; without a kubelet nothing runs it, so the test stops there.
func TestKubectl_Debug(t *testing.T) {
	bins := kubectls(t)
	s := startServer(t, t.TempDir())
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			pod := "debug-" + strings.ReplaceAll(name, ".", "-")
			s.mustKubectl(t, bin, "run", pod, "--image=busybox", "--restart=Never")
			s.mustKubectl(t, bin, "debug", pod, "--image=busybox", "--container=debugger", "--target="+pod)
			out := s.mustKubectl(t, bin, "get", "pod", pod, "-o", "jsonpath={.spec.ephemeralContainers[*].name} {.spec.ephemeralContainers[*].targetContainerName}")
			if out != "debugger "+pod {
				t.Errorf("ephemeral containers (name, target): %q", out)
			}
		})
	}
}
