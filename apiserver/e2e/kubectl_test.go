package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectl runs the commands that work today with each kubectl against
// one `sqlkube server`, each kubectl in a namespace of its own.
func TestKubectl(t *testing.T) {
	bins := kubectls(t)
	s := startServer(t, t.TempDir())
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			ns := "e2e-" + strings.ReplaceAll(name, ".", "-")
			if out := s.mustKubectl(t, bin, "get", "ns"); !strings.Contains(out, "kube-system") || !strings.Contains(out, "Active") {
				t.Fatalf("get ns:\n%s", out)
			}
			s.mustKubectl(t, bin, "create", "namespace", ns)
			s.mustKubectl(t, bin, "-n", ns, "create", "configmap", "cfg", "--from-literal=color=blue")
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "cm", "cfg", "-o", "jsonpath={.data.color}"); out != "blue" {
				t.Fatalf("jsonpath: got %q", out)
			}
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "configmaps", "cfg", "-o", "custom-columns=NAME:.metadata.name,COLOR:.data.color"); !strings.Contains(out, "cfg    blue") {
				t.Fatalf("custom-columns:\n%s", out)
			}
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "cm", "cfg", "-o", "yaml"); !strings.Contains(out, "color: blue") || !strings.Contains(out, "uid:") {
				t.Fatalf("-o yaml:\n%s", out)
			}
			var asJSON struct {
				Kind string            `json:"kind"`
				Data map[string]string `json:"data"`
			}
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "cm", "cfg", "-o", "json"); json.Unmarshal([]byte(out), &asJSON) != nil || asJSON.Kind != "ConfigMap" || asJSON.Data["color"] != "blue" {
				t.Fatalf("-o json:\n%s", out)
			}
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "cm", "-o", "json"); !strings.Contains(out, `"kind": "List"`) || !strings.Contains(out, `"color": "blue"`) {
				t.Fatalf("list -o json:\n%s", out)
			}
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "cm"); !strings.Contains(out, "NAME") || !strings.Contains(out, "DATA") {
				t.Fatalf("table:\n%s", out)
			}
			if out := s.mustKubectl(t, bin, "api-resources"); !strings.Contains(out, "configmaps") || !strings.Contains(out, "cm ") {
				t.Fatalf("api-resources:\n%s", out)
			}

			// get -w sees a change made while it watches.
			lines := s.kubectlLines(t, bin, "-n", ns, "get", "cm", "-w", "--output-watch-events", "-o", "name")
			// (The namespace's kube-root-ca.crt, published by a controller,
			// may be listed or arrive at any point.)
			if !scanUntil(lines, "configmap/cfg") {
				t.Fatalf("watch did not list cfg: %q", lines.Text())
			}
			s.mustKubectl(t, bin, "-n", ns, "create", "configmap", "late")
			if !scanUntil(lines, "configmap/late") {
				t.Fatalf("watch did not see the new configmap: %q", lines.Text())
			}

			// Imperative pods, wide output and describe (which also reads
			// the object's events by field selector).
			if out := s.mustKubectl(t, bin, "-n", ns, "run", "solo", "--image=busybox:1.36", "--restart=Never", "--labels=app=solo"); !strings.Contains(out, "pod/solo created") {
				t.Fatalf("run:\n%s", out)
			}
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "pods", "-o", "wide"); !strings.Contains(out, "NOMINATED NODE") || !strings.Contains(out, "solo") || !strings.Contains(out, "Pending") {
				t.Fatalf("get pods -o wide:\n%s", out)
			}
			uid := s.mustKubectl(t, bin, "-n", ns, "get", "pod", "solo", "-o", "jsonpath={.metadata.uid}")
			s.mustKubectl(t, bin, "-n", ns, "create", "-f", writeEvent(t, ns, uid))
			if out := s.mustKubectl(t, bin, "-n", ns, "describe", "pod", "solo"); !strings.Contains(out, "Name:") || !strings.Contains(out, "busybox:1.36") ||
				!strings.Contains(out, "QoS Class:") || !strings.Contains(out, "BestEffort") || !strings.Contains(out, "e2e-scheduled") {
				t.Fatalf("describe pod:\n%s", out)
			}

			// Declarative management: client-side apply, then updates
			// through apply, patches of each kind, label, annotate, scale.
			manifest := filepath.Join(t.TempDir(), "deploy.yaml")
			writeDeployment(t, manifest, ns, 2, "nginx:1.25")
			if out := s.mustKubectl(t, bin, "apply", "-f", manifest); !strings.Contains(out, "deployment.apps/web created") {
				t.Fatalf("apply (create):\n%s", out)
			}
			writeDeployment(t, manifest, ns, 3, "nginx:1.26")
			if out := s.mustKubectl(t, bin, "apply", "-f", manifest); !strings.Contains(out, "configured") {
				t.Fatalf("apply (update):\n%s", out)
			}
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.metadata.generation}"); out != "3 nginx:1.26 2" {
				t.Fatalf("after apply: %q", out)
			}
			s.mustKubectl(t, bin, "-n", ns, "label", "deploy", "web", "tier=front")
			s.mustKubectl(t, bin, "-n", ns, "annotate", "deploy", "web", "note=hello")
			s.mustKubectl(t, bin, "-n", ns, "patch", "deploy", "web", "--type=merge", "-p", `{"metadata":{"labels":{"merge":"yes"}}}`)
			s.mustKubectl(t, bin, "-n", ns, "patch", "deploy", "web", "--type=json", "-p", `[{"op":"add","path":"/metadata/labels/json","value":"yes"}]`)
			s.mustKubectl(t, bin, "-n", ns, "patch", "deploy", "web", "-p", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.27"}]}}}}`)
			s.mustKubectl(t, bin, "-n", ns, "scale", "deploy", "web", "--replicas=4")
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.metadata.labels.tier}{.metadata.labels.merge}{.metadata.labels.json} {.metadata.annotations.note}"); out != "4 nginx:1.27 frontyesyes hello" {
				t.Fatalf("after label, annotate, patches and scale: %q", out)
			}
			// Server-side apply takes over with --force-conflicts (the
			// client-side manager owns replicas).
			writeDeployment(t, manifest, ns, 1, "nginx:1.27")
			if _, err := s.kubectl(t, bin, "apply", "--server-side", "-f", manifest); err == nil || !strings.Contains(err.Error(), "conflict") {
				t.Fatalf("server-side apply over another manager's field: got %v, want a conflict", err)
			}
			s.mustKubectl(t, bin, "apply", "--server-side", "--force-conflicts", "-f", manifest)
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"); out != "1" {
				t.Fatalf("after forced server-side apply: replicas %q", out)
			}
			// Server-side dry run writes nothing.
			s.mustKubectl(t, bin, "-n", ns, "create", "configmap", "dry", "--dry-run=server")
			if _, err := s.kubectl(t, bin, "-n", ns, "get", "cm", "dry"); err == nil {
				t.Fatal("a server-side dry-run create was stored")
			}
			if out := s.mustKubectl(t, bin, "explain", "deployment.spec.replicas"); !strings.Contains(out, "integer") {
				t.Fatalf("explain:\n%s", out)
			}
			// Foreground deletion: the garbage collector deletes the
			// ReplicaSets first, then the Deployment goes; kubectl waits.
			s.mustKubectl(t, bin, "-n", ns, "delete", "deploy", "web", "--cascade=foreground", "--timeout=60s")
			if out := s.mustKubectl(t, bin, "-n", ns, "get", "rs", "-l", "app=web", "-o", "name"); out != "" {
				t.Fatalf("ReplicaSets left after a foreground deletion: %q", out)
			}
			s.mustKubectl(t, bin, "-n", ns, "create", "configmap", "bg")
			s.mustKubectl(t, bin, "-n", ns, "delete", "configmap", "bg", "--cascade=background")

			s.mustKubectl(t, bin, "-n", ns, "delete", "configmap", "cfg", "late")
			if _, err := s.kubectl(t, bin, "-n", ns, "get", "cm", "cfg"); err == nil || !strings.Contains(err.Error(), "NotFound") {
				t.Fatalf("get after delete: %v", err)
			}

			// The kubernetes service: first IP of the range, 443/TCP.
			if out := s.mustKubectl(t, bin, "-n", "default", "get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP} {.spec.ports[0].port}/{.spec.ports[0].protocol}"); out != "10.96.0.1 443/TCP" {
				t.Fatalf("get svc kubernetes: %q", out)
			}
			if out := s.mustKubectl(t, bin, "-n", "default", "get", "endpoints", "kubernetes", "-o", "jsonpath={.subsets[0].ports[0].port}"); out != s.port() {
				t.Fatalf("kubernetes endpoints port %q, want %s", out, s.port())
			}

			// Namespace deletion: the namespace controller empties it, then
			// it goes; system namespaces stay.
			s.mustKubectl(t, bin, "-n", ns, "create", "configmap", "last")
			s.mustKubectl(t, bin, "-n", ns, "create", "deployment", "app", "--image=nginx")
			s.mustKubectl(t, bin, "delete", "namespace", ns, "--wait=false")
			s.mustKubectl(t, bin, "wait", "--for=delete", "ns/"+ns, "--timeout=60s")
			if _, err := s.kubectl(t, bin, "get", "ns", ns); err == nil || !strings.Contains(err.Error(), "NotFound") {
				t.Fatalf("get ns after its deletion: %v", err)
			}
			if out, err := s.kubectl(t, bin, "-n", ns, "get", "cm,deploy", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
				t.Fatalf("content of a deleted namespace: %v %q", err, out)
			}
			if _, err := s.kubectl(t, bin, "delete", "namespace", "kube-system"); err == nil || !strings.Contains(err.Error(), "may not be deleted") {
				t.Fatalf("delete namespace kube-system: %v", err)
			}
		})
	}
}

// TestKubectl_WrongCA: the admin kubeconfig works over verified TLS; the
// same kubeconfig with another CA fails, and no credentials get 401.
func TestKubectl_WrongCA(t *testing.T) {
	bins := kubectls(t)
	s := startServer(t, t.TempDir())
	kc, err := os.ReadFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(kc), "insecure-skip-tls-verify") {
		t.Fatal("the admin kubeconfig skips TLS verification")
	}
	// Another server's CA.
	other := startServer(t, t.TempDir())
	otherKC, err := os.ReadFile(other.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	wrong := replaceField(string(kc), "certificate-authority-data", fieldValue(string(otherKC), "certificate-authority-data"))
	path := filepath.Join(t.TempDir(), "wrong-ca")
	if err := os.WriteFile(path, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := &server{kubeconfig: path}
	if _, err := bad.kubectl(t, bins["kubectl"], "get", "ns"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("kubectl with the wrong CA: got %v, want a certificate error", err)
	}
	// No client certificate (a token the server does not know): 401.
	anon := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + s.url +
		"\n    certificate-authority-data: " + fieldValue(string(kc), "certificate-authority-data") +
		"\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: anon\nusers:\n- name: anon\n  user:\n    token: not-a-valid-token\ncurrent-context: c\n"
	path = filepath.Join(t.TempDir(), "anon")
	if err := os.WriteFile(path, []byte(anon), 0o600); err != nil {
		t.Fatal(err)
	}
	noCreds := &server{kubeconfig: path}
	if _, err := noCreds.kubectl(t, bins["kubectl"], "get", "ns"); err == nil || !strings.Contains(err.Error(), "must be logged in") {
		t.Fatalf("kubectl without credentials: got %v, want Unauthorized", err)
	}
}

func fieldValue(yaml, key string) string {
	for _, l := range strings.Split(yaml, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+": "); ok {
			return v
		}
	}
	return ""
}

func replaceField(yaml, key, value string) string {
	lines := strings.Split(yaml, "\n")
	for i, l := range lines {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, key+": ") {
			lines[i] = l[:len(l)-len(t)] + key + ": " + value
		}
	}
	return strings.Join(lines, "\n")
}

// writeDeployment writes a Deployment manifest named web.
func writeDeployment(t *testing.T, path, ns string, replicas int, image string) {
	t.Helper()
	m := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: %s
  labels: {app: web}
spec:
  replicas: %d
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: %s
`, ns, replicas, image)
	if err := os.WriteFile(path, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
}

// port is the server's secure port.
func (s *server) port() string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.url, "https://"))
	return port
}

// writeEvent writes an event about pod "solo" (uid) in ns, as a scheduler
// would report it, and returns the file.
func writeEvent(t *testing.T, ns, uid string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "event.yaml")
	doc := fmt.Sprintf(`apiVersion: v1
kind: Event
metadata:
  name: solo.e2e
  namespace: %s
involvedObject:
  apiVersion: v1
  kind: Pod
  name: solo
  namespace: %s
  uid: %s
reason: e2e-scheduled
message: assigned by the e2e test
type: Normal
source:
  component: e2e
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-01T00:00:00Z"
count: 1
`, ns, ns, uid)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// scanUntil reads lines until one contains want (false if the stream ends,
// or a few lines pass, without it).
func scanUntil(lines *bufio.Scanner, want string) bool {
	for i := 0; i < 5 && lines.Scan(); i++ {
		if strings.Contains(lines.Text(), want) {
			return true
		}
	}
	return false
}
