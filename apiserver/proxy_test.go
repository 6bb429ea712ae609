package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/websocket"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
)

// Addresses of the simulated cluster network (TEST-NET-2): the server
// dials them through clusterNetwork, which connects to local listeners.
const (
	testPodIP  = "198.51.100.7"
	testNodeIP = "198.51.100.8"
)

// clusterNetwork stands in for the pod network (apiserver.Config's
// ClusterDial): a dial to an address it routes connects to the local
// listener behind it; any other is refused.
type clusterNetwork struct {
	mu     sync.Mutex
	routes map[string]string
}

func (n *clusterNetwork) route(clusterAddr, localAddr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.routes == nil {
		n.routes = map[string]string{}
	}
	n.routes[clusterAddr] = localAddr
}

func (n *clusterNetwork) dial(ctx context.Context, network, address string) (net.Conn, error) {
	n.mu.Lock()
	target, ok := n.routes[address]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no route to %s", address)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, target)
}

// echoBackend is a pod's (or node's) server: it answers every request
// with "NAME METHOD URI BODY", and X-Forwarded-Uri in a header.
func echoBackend(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Forwarded-Uri", r.Header.Get("X-Forwarded-Uri"))
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s %s %s", name, r.Method, r.URL.RequestURI(), body)
	})
}

// listenOn starts srv (plain or TLS) and routes clusterIP:its port to
// it; it returns the port.
func listenOn(t *testing.T, network *clusterNetwork, srv *httptest.Server, tls bool, clusterIP string) int32 {
	t.Helper()
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	network.route(net.JoinHostPort(clusterIP, portStr), srv.Listener.Addr().String())
	return int32(port)
}

// proxyServer is a server on a simulated cluster network with one pod,
// web (podIP testPodIP, container port httpPort first), serving
// echoBackend on httpPort and over TLS on httpsPort.
type proxyServer struct {
	cfg                 *rest.Config
	cs                  kubernetes.Interface
	network             *clusterNetwork
	httpPort, httpsPort int32
}

func newProxyServer(t *testing.T) *proxyServer {
	t.Helper()
	network := &clusterNetwork{}
	cfg, _ := newServerWith(t, apiserver.Config{ClusterDial: network.dial})
	s := &proxyServer{cfg: cfg, cs: kubernetes.NewForConfigOrDie(cfg), network: network}
	s.httpPort = listenOn(t, network, httptest.NewUnstartedServer(echoBackend("web")), false, testPodIP)
	s.httpsPort = listenOn(t, network, httptest.NewUnstartedServer(echoBackend("web-tls")), true, testPodIP)
	s.runningPod(t, "web", testPodIP, corev1.ContainerPort{ContainerPort: s.httpPort})
	return s
}

// runningPod creates a pod with a container of ports and gives it ip.
func (s *proxyServer) runningPod(t *testing.T, name, ip string, ports ...corev1.ContainerPort) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox", Ports: ports}}},
	}
	pod, err := s.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if ip != "" {
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	if _, err := s.cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// do sends method to the API path with body and returns the status
// code, the answer's body and its headers.
func (s *proxyServer) do(t *testing.T, method, path, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.cfg.Host+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(out), resp.Header
}

// rawGet GETs uri (a path and query) with client-go's REST client, as
// kubectl get --raw does; errors are API statuses.
func rawGet(cs kubernetes.Interface, uri string) (string, error) {
	res := cs.CoreV1().RESTClient().Get().RequestURI(uri).Do(context.Background())
	body, _ := res.Raw()
	return string(body), res.Error()
}

// TestProxy_Pods: pods/proxy reaches the pod's IP on the port its name
// gives (NAME: the first container port; NAME:PORT; https:NAME:PORT, TLS
// not verified) with the path and query below .../proxy, for every
// method the proxy takes; pods without a routable IP, missing pods and
// refused connections are errors as kube-apiserver answers them.
func TestProxy_Pods(t *testing.T) {
	s := newProxyServer(t)
	base := "/api/v1/namespaces/default/pods/"
	for _, tc := range []struct{ path, want string }{
		{"web/proxy/hello?x=1&y=2", "web GET /hello?x=1&y=2 "},
		{"web/proxy/", "web GET / "},
		{fmt.Sprintf("web:%d/proxy/a/b/", s.httpPort), "web GET /a/b/ "},
		{fmt.Sprintf("http:web:%d/proxy/a%%20b", s.httpPort), "web GET /a%20b "},
		{fmt.Sprintf("https:web:%d/proxy/secure", s.httpsPort), "web-tls GET /secure "},
	} {
		got, err := rawGet(s.cs, base+tc.path)
		if err != nil || got != tc.want {
			t.Errorf("GET %s: %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		code, body, _ := s.do(t, method, base+"web/proxy/things?n=1", "payload")
		if want := "web " + method + " /things?n=1 payload"; code != http.StatusOK || body != want {
			t.Errorf("%s: %d %q, want 200 %q", method, code, body, want)
		}
	}
	if code, body, _ := s.do(t, http.MethodHead, base+"web/proxy/x", ""); code != http.StatusOK || body != "" {
		t.Errorf("HEAD: %d %q", code, body)
	}
	// The path the pod's server is told it is reached by.
	if _, _, h := s.do(t, http.MethodGet, base+"web/proxy/x/y", ""); h.Get("X-Seen-Forwarded-Uri") != base+"web/proxy/x/y" {
		t.Errorf("X-Forwarded-Uri %q", h.Get("X-Seen-Forwarded-Uri"))
	}
	// The proxy root without its slash is redirected to it.
	if code, body, _ := s.do(t, http.MethodGet, base+"web/proxy", ""); code != http.StatusOK || body != "web GET / " {
		t.Errorf("GET .../proxy (redirected): %d %q", code, body)
	}

	s.runningPod(t, "loopback", "127.0.0.1", corev1.ContainerPort{ContainerPort: s.httpPort})
	s.runningPod(t, "pending", "")
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"loopback/proxy/", http.StatusBadRequest, "address not allowed"},
		{"pending/proxy/", http.StatusBadRequest, "address not allowed"},
		{"missing/proxy/", http.StatusNotFound, `pods "missing" not found`},
		{"web:1/proxy/", http.StatusServiceUnavailable, "error trying to reach service"},
		{"web:a:b:c/proxy/", http.StatusBadRequest, "invalid pod request"},
	} {
		_, err := rawGet(s.cs, base+tc.path)
		var status apierrors.APIStatus
		if !asStatus(err, &status) || int(status.Status().Code) != tc.code || !strings.Contains(status.Status().Message, tc.msg) {
			t.Errorf("GET %s: %v, want %d %q", tc.path, err, tc.code, tc.msg)
		}
	}
	// Methods the proxy does not take.
	if code, _, _ := s.do(t, "TRACE", base+"web/proxy/", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("TRACE: %d, want 405", code)
	}
}

// asStatus reports whether err is an API status error, setting *status.
func asStatus(err error, status *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*status = s
	}
	return ok
}

// TestProxy_Services: services/proxy reaches one of the service's ready
// EndpointSlice addresses that is a pod's, on the endpoint port the service
// port names (NAME for an unnamed port, NAME:PORTNAME, NAME:PORT by
// number, https:NAME:PORT); a service without slices or ready endpoints,
// or whose addresses are no pods, is a 503.
func TestProxy_Services(t *testing.T) {
	s := newProxyServer(t)
	ctx := context.Background()
	svc := func(name string, ports ...corev1.ServicePort) {
		t.Helper()
		_, err := s.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: ports},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The service's EndpointSlice, as the EndpointSlice controller writes
	// it (Kubernetes' service location reads slices since 1.37).
	endpoints := func(name string, addr discoveryv1.Endpoint, ports ...discoveryv1.EndpointPort) {
		t.Helper()
		addr.Conditions.Ready = ptr.To(true)
		_, err := s.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{addr}, Ports: ports,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	port := func(name string, number int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(number), Protocol: ptr.To(corev1.ProtocolTCP)}
	}
	webPod := discoveryv1.Endpoint{Addresses: []string{testPodIP}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"}}
	svc("frontend", corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(s.httpPort)})
	endpoints("frontend", webPod, port("", s.httpPort))
	svc("multi", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromInt32(s.httpPort)},
		corev1.ServicePort{Name: "tls", Port: 443, TargetPort: intstr.FromInt32(s.httpsPort)})
	endpoints("multi", webPod, port("http", s.httpPort), port("tls", s.httpsPort))
	svc("nopods", corev1.ServicePort{Port: 80})
	endpoints("nopods", discoveryv1.Endpoint{Addresses: []string{testPodIP}}, port("", s.httpPort))
	svc("empty", corev1.ServicePort{Port: 80})

	base := "/api/v1/namespaces/default/services/"
	for _, tc := range []struct{ path, want string }{
		{"frontend/proxy/guestbook?cmd=get", "web GET /guestbook?cmd=get "},
		{"frontend:80/proxy/", "web GET / "},
		{"multi:http/proxy/a", "web GET /a "},
		{"multi:80/proxy/a/", "web GET /a/ "},
		{"https:multi:tls/proxy/s", "web-tls GET /s "},
		{"https:multi:443/proxy/s", "web-tls GET /s "},
	} {
		got, err := rawGet(s.cs, base+tc.path)
		if err != nil || got != tc.want {
			t.Errorf("GET %s: %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	if code, body, _ := s.do(t, http.MethodPost, base+"frontend/proxy/add", "v=1"); code != http.StatusOK || body != "web POST /add v=1" {
		t.Errorf("POST: %d %q", code, body)
	}
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"multi/proxy/", http.StatusServiceUnavailable, "no endpoints available"}, // no unnamed port
		{"multi:8080/proxy/", http.StatusServiceUnavailable, "no service port 8080"},
		{"nopods/proxy/", http.StatusServiceUnavailable, "no endpoints available"},
		{"empty/proxy/", http.StatusServiceUnavailable, "no endpoints available"},
		{"missing:80/proxy/", http.StatusNotFound, `services "missing" not found`},
	} {
		_, err := rawGet(s.cs, base+tc.path)
		var status apierrors.APIStatus
		if !asStatus(err, &status) || int(status.Status().Code) != tc.code || !strings.Contains(status.Status().Message, tc.msg) {
			t.Errorf("GET %s: %v, want %d %q", tc.path, err, tc.code, tc.msg)
		}
	}
}

// TestProxy_Nodes: nodes/proxy reaches the node's kubelet (NAME, or its
// kubelet port) with the kubelet client, and another port of the node
// (NAME:PORT, https:NAME:PORT) with the proxy transport.
func TestProxy_Nodes(t *testing.T) {
	network := &clusterNetwork{}
	cfg, _ := newServerWith(t, apiserver.Config{ClusterDial: network.dial})
	cs := kubernetes.NewForConfigOrDie(cfg)
	kubeletPort := listenOn(t, network, httptest.NewUnstartedServer(echoBackend("kubelet")), true, testNodeIP)
	otherPort := listenOn(t, network, httptest.NewUnstartedServer(echoBackend("node-exporter")), false, testNodeIP)
	otherTLSPort := listenOn(t, network, httptest.NewUnstartedServer(echoBackend("node-tls")), true, testNodeIP)
	createNode(t, cs, "vm", testNodeIP, kubeletPort)
	createNode(t, cs, "local", "127.0.0.1", kubeletPort)

	for _, tc := range []struct{ path, want string }{
		{"vm/proxy/pods", "kubelet GET /pods "},
		{fmt.Sprintf("vm:%d/proxy/pods", kubeletPort), "kubelet GET /pods "},
		{fmt.Sprintf("vm:%d/proxy/metrics", otherPort), "node-exporter GET /metrics "},
		{fmt.Sprintf("https:vm:%d/proxy/metrics?x=1", otherTLSPort), "node-tls GET /metrics?x=1 "},
	} {
		got, err := rawGet(cs, "/api/v1/nodes/"+tc.path)
		if err != nil || got != tc.want {
			t.Errorf("GET %s: %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"local/proxy/pods", http.StatusBadRequest, "address not allowed"},
		{"missing/proxy/pods", http.StatusNotFound, `nodes "missing" not found`},
	} {
		_, err := rawGet(cs, "/api/v1/nodes/"+tc.path)
		var status apierrors.APIStatus
		if !asStatus(err, &status) || int(status.Status().Code) != tc.code || !strings.Contains(status.Status().Message, tc.msg) {
			t.Errorf("GET %s: %v, want %d %q", tc.path, err, tc.code, tc.msg)
		}
	}
}

// createNode creates a node whose kubelet listens on ip:port.
func createNode(t *testing.T, cs kubernetes.Interface, name, ip string, port int32) {
	t.Helper()
	ctx := context.Background()
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestProxy_Authorization: the proxies are authorized as verbs on
// pods/proxy, services/proxy and nodes/proxy (get for GET), as
// kube-apiserver authorizes them: reading pods is not enough.
func TestProxy_Authorization(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	// alice may read pods, not proxy to them.
	grantInTeamA(t, s, "alice", "pod-reader", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}},
		func(ctx context.Context, cs kubernetes.Interface) error {
			_, err := cs.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
			return err
		})
	if _, err := admin.CoreV1().Pods("team-a").Create(ctx, simplePod("web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := rawGet(s.as("alice-token"), "/api/v1/namespaces/team-a/pods/web:8080/proxy/")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot get resource "pods/proxy"`) {
		t.Fatalf("alice, a pod reader, proxies: %v, want Forbidden on pods/proxy", err)
	}
	grantInTeamA(t, s, "bob", "pod-proxy", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get"}}},
		func(ctx context.Context, cs kubernetes.Interface) error {
			r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: "team-a", Verb: "get", Resource: "pods", Subresource: "proxy", Name: "web:8080",
				}},
			}, metav1.CreateOptions{})
			if err == nil && !r.Status.Allowed {
				err = fmt.Errorf("not allowed: %s", r.Status.Reason)
			}
			return err
		})
	// Authorized: the request reaches the pod, which has no address.
	_, err = rawGet(s.as("bob-token"), "/api/v1/namespaces/team-a/pods/web:8080/proxy/")
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "address not allowed") {
		t.Fatalf("bob, allowed pods/proxy: %v, want the pod's BadRequest", err)
	}
}

// TestProxy_ConnectAdmission: a proxy request is admitted as a CONNECT
// of pods/proxy with its PodProxyOptions (the path below .../proxy), an
// exec as one of pods/exec with its PodExecOptions, as kube-apiserver
// admits them: a policy whose rules name CONNECT can refuse them before
// anything is connected.
func TestProxy_ConnectAdmission(t *testing.T) {
	s := newProxyServer(t)
	createPolicy(t, s.cs, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-admin"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/proxy", "pods/exec"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "!has(object.path) || !object.path.startsWith('/admin')", Message: "no admin pages"},
				{Expression: "!has(object.command) || !('rm' in object.command)", Message: "no rm"},
			},
		},
	}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-admin"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "no-admin", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	})
	base := "/api/v1/namespaces/default/pods/web/proxy/"
	var err error
	eventually(t, "the policy to deny", func() bool {
		_, err = rawGet(s.cs, base+"admin/users")
		return err != nil
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "no admin pages") {
		t.Errorf("GET .../proxy/admin/users: %v, want the policy's 422", err)
	}
	if got, err := rawGet(s.cs, base+"public"); err != nil || got != "web GET /public " {
		t.Errorf("GET .../proxy/public: %q, %v", got, err)
	}
	// exec is a CONNECT too, with its PodExecOptions.
	exec := func(command string) error {
		return s.cs.CoreV1().RESTClient().Post().RequestURI("/api/v1/namespaces/default/pods/web/exec?stdout=true&command=" + command).Do(context.Background()).Error()
	}
	if err := exec("rm"); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "no rm") {
		t.Errorf("exec rm: %v, want the policy's 422", err)
	}
	if err := exec("ls"); err == nil || strings.Contains(err.Error(), "no rm") {
		t.Errorf("exec ls (the pod has no node): %v, want an error that is not the policy's", err)
	}
}

// TestProxy_PodsWebsocket: an upgrade (a websocket) passes through
// pods/proxy to the pod, both ways.
func TestProxy_PodsWebsocket(t *testing.T) {
	s := newProxyServer(t)
	echo := websocket.Handler(func(ws *websocket.Conn) { _, _ = io.Copy(ws, ws) })
	port := listenOn(t, s.network, httptest.NewUnstartedServer(echo), false, testPodIP)
	cfg, err := websocket.NewConfig(fmt.Sprintf("ws%s/api/v1/namespaces/default/pods/web:%d/proxy/echo", strings.TrimPrefix(s.cfg.Host, "http"), port), "http://localhost")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("a websocket through pods/proxy: %v", err)
	}
	defer ws.Close()
	if err := websocket.Message.Send(ws, "ping through the proxy"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := websocket.Message.Receive(ws, &got); err != nil || got != "ping through the proxy" {
		t.Fatalf("echoed %q, %v", got, err)
	}
}
