package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/internal/testcert"
)

// TestKubectl_Aggregation: an aggregated API server in the test process
// (TLS from its own CA, trusting the front-proxy CA the server publishes
// in kube-system/extension-apiserver-authentication), behind a Service
// and a hand-made EndpointSlice, registered by an APIService: each
// kubectl reaches it with `get --raw` (the backend sees the admin's
// identity in X-Remote-User), finds its resources by discovery and gets
// them; the same server also serves metrics.k8s.io, as metrics-server,
// and `kubectl top node` shows the simulated node's usage.
func TestKubectl_Aggregation(t *testing.T) {
	bins := kubectls(t)
	ip := testcert.HostIPv4(t) // EndpointSlices may not name loopback addresses
	s := startCommand(t, t.TempDir(), "server", "--fake-nodes", "1")
	requestHeaderCA := s.mustKubectl(t, bins["kubectl"], "get", "configmap", "-n", "kube-system", "extension-apiserver-authentication",
		"-o", "jsonpath={.data.requestheader-client-ca-file}")
	port, caBundle := aggregatedBackend(t, ip, []byte(requestHeaderCA))
	dir := t.TempDir()
	objects := filepath.Join(dir, "aggregated.yaml")
	writeFile(t, objects, fmt.Sprintf(aggregatedObjects, ip, port, base64.StdEncoding.EncodeToString(caBundle)))
	s.mustKubectl(t, bins["kubectl"], "apply", "-f", objects)
	s.mustKubectl(t, bins["kubectl"], "wait", "--for=condition=Available", "apiservice/v1alpha1.wardle.e2e.example.com",
		"apiservice/v1beta1.metrics.k8s.io", "--timeout=60s")
	s.mustKubectl(t, bins["kubectl"], "wait", "--for=condition=Ready", "node/fake-0", "--timeout=60s")

	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			out := s.mustKubectl(t, bin, "get", "--raw", "/apis/wardle.e2e.example.com/v1alpha1/namespaces/default/flunders")
			var got struct {
				User   string   `json:"user"`
				Groups []string `json:"groups"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil || got.User != "kubernetes-admin" || !strings.Contains(strings.Join(got.Groups, ","), "system:masters") {
				t.Fatalf("the backend saw %s (%v)", out, err)
			}
			out = s.mustKubectl(t, bin, "get", "--raw", "/apis/wardle.e2e.example.com/v1alpha1")
			if !strings.Contains(out, `"flunders"`) {
				t.Fatalf("discovery document: %s", out)
			}
			out = s.mustKubectl(t, bin, "api-resources", "--api-group=wardle.e2e.example.com")
			if !strings.Contains(out, "flunders") || !strings.Contains(out, "Flunder") {
				t.Fatalf("api-resources: %s", out)
			}
			out = s.mustKubectl(t, bin, "get", "flunders", "-n", "default", "-o", "name")
			if strings.TrimSpace(out) != "flunder.wardle.e2e.example.com/one" {
				t.Fatalf("get flunders: %q", out)
			}
			out = s.mustKubectl(t, bin, "get", "apiservice", "v1alpha1.wardle.e2e.example.com")
			if !strings.Contains(out, "wardle/api") || !strings.Contains(out, "True") {
				t.Fatalf("get apiservice: %s", out)
			}
			out = s.mustKubectl(t, bin, "top", "node")
			if !strings.Contains(out, "fake-0") || !strings.Contains(out, "250m") {
				t.Fatalf("top node: %s", out)
			}
		})
	}
}

const aggregatedObjects = `apiVersion: v1
kind: Namespace
metadata: {name: wardle}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: wardle}
spec:
  ports: [{name: https, port: 443}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-1
  namespace: wardle
  labels: {kubernetes.io/service-name: api}
addressType: IPv4
endpoints: [{addresses: ["%[1]s"], conditions: {ready: true}}]
ports: [{name: https, port: %[2]d}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.wardle.e2e.example.com}
spec:
  group: wardle.e2e.example.com
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service: {name: api, namespace: wardle, port: 443}
  caBundle: %[3]s
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service: {name: api, namespace: wardle, port: 443}
  caBundle: %[3]s
`

// aggregatedBackend serves wardle.e2e.example.com/v1alpha1 over TLS on
// ip, to clients with a certificate from requestHeaderCA: discovery, and
// flunders (one, named "one"; the list carries the X-Remote-User and
// X-Remote-Group it was sent), and metrics.k8s.io/v1beta1 node metrics
// (fake-0 uses 250m of CPU and 64Mi of memory). It returns its port and
// CA.
func aggregatedBackend(t *testing.T, ip string, requestHeaderCA []byte) (int, []byte) {
	t.Helper()
	clientCAs := x509.NewCertPool()
	if !clientCAs.AppendCertsFromPEM(requestHeaderCA) {
		t.Fatalf("requestheader-client-ca-file is not PEM: %q", requestHeaderCA)
	}
	ca, cert := testcert.Serving(t, "api.wardle.svc", ip)
	gv := "wardle.e2e.example.com/v1alpha1"
	mux := http.NewServeMux()
	mux.HandleFunc("/apis/"+gv, func(w http.ResponseWriter, r *http.Request) {
		writeJSONResponse(w, map[string]any{
			"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
			"resources": []any{map[string]any{"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder", "verbs": []string{"get", "list"}}},
		})
	})
	mux.HandleFunc("/apis/"+gv+"/namespaces/{ns}/flunders", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResponse(w, map[string]any{
			"kind": "FlunderList", "apiVersion": gv, "metadata": map[string]any{"resourceVersion": "1"},
			"items": []any{map[string]any{"kind": "Flunder", "apiVersion": gv, "metadata": map[string]any{
				"name": "one", "namespace": r.PathValue("ns"), "creationTimestamp": time.Now().UTC().Format(time.RFC3339),
			}}},
			"user": r.Header.Get("X-Remote-User"), "groups": r.Header.Values("X-Remote-Group"),
		})
	})
	metrics := "metrics.k8s.io/v1beta1"
	mux.HandleFunc("/apis/"+metrics, func(w http.ResponseWriter, r *http.Request) {
		writeJSONResponse(w, map[string]any{
			"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": metrics,
			"resources": []any{
				map[string]any{"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": []string{"get", "list"}},
				map[string]any{"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": []string{"get", "list"}},
			},
		})
	})
	mux.HandleFunc("/apis/"+metrics+"/nodes", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UTC().Format(time.RFC3339)
		writeJSONResponse(w, map[string]any{
			"kind": "NodeMetricsList", "apiVersion": metrics, "metadata": map[string]any{},
			"items": []any{map[string]any{
				"metadata": map[string]any{"name": "fake-0", "creationTimestamp": now}, "timestamp": now, "window": "10s",
				"usage": map[string]any{"cpu": "250m", "memory": "64Mi"},
			}},
		})
	})
	hs := httptest.NewUnstartedServer(mux)
	_ = hs.Listener.Close()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	hs.Listener = l
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return l.Addr().(*net.TCPAddr).Port, ca
}

func writeJSONResponse(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
