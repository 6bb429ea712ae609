package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/internal/testcert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationhelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// helmTimeout bounds one helm command; helm's own --timeout (what it
// waits for resources and hooks) is helmWait.
const (
	helmTimeout = 3 * time.Minute
	helmWait    = "2m"
)

// TestHelm: real Helm, v3 and v4 (v4 applies server-side by default),
// each against its own `sqlkube server --fake-nodes 3` with an audit log,
// installs, upgrades (replicas and an env var), rolls back and uninstalls
// a chart the test writes: a Deployment and a Service selecting its
// pods, an aggregated APIService in front of a backend in the test
// process, and a Job run as a post-install/upgrade/rollback hook. Every
// command waits (--wait) and must succeed; after each step the objects
// are what the release says (replicas, env, a cluster IP that stays the
// same, endpoints for the ready pods, the APIService Available and its
// group in discovery, helm's own discovery of it as rendered into the
// chart, the hook Job run to success and deleted by helm), after
// uninstall they are all gone; the server logs no panic and answers no
// request with a 5xx.
//
// Helm binaries come from `make test-deps-helm` (HELM_DIR/helm-v3/helm and
// HELM_DIR/helm-v4/helm; SQLKUBE_HELM_DIR, or GOPATH/bin by default);
// a missing one is skipped with a line, or fails under CI=true.
func TestHelm(t *testing.T) {
	ip := testcert.HostIPv4(t) // EndpointSlices may not name loopback addresses
	for _, major := range []string{"v3", "v4"} {
		t.Run(major, func(t *testing.T) {
			h := helmBinary(t, major)
			dir := t.TempDir()
			auditLog := filepath.Join(dir, "audit.log")
			s := startCommand(t, filepath.Join(dir, "data"), "server", "--fake-nodes", "3", "--audit-log-path", auditLog)
			// Runs even when a step fails: a server that died or logged
			// a panic, or answered 5xx, is the likeliest reason.
			defer checkServerHealth(t, s, auditLog)
			h.env = helmEnv(t, s.kubeconfig)
			testHelmRelease(t, h, s, ip, auditLog)
		})
	}
}

// testHelmRelease runs the release's life with h against s.
func testHelmRelease(t *testing.T, h *helmCLI, s *server, ip, auditLog string) {
	ctx := context.Background()
	cs := s.clientset(t)
	agg, err := aggregatorclient.NewForConfig(s.restConfig(t, s.kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, ca := aggregatedBackend(t, ip, []byte(auth.Data["requestheader-client-ca-file"]))
	chart := writeHelmChart(t, ip, port, ca)
	// The backend's certificate names api.wardle.svc.
	const ns, rel = "wardle", "demo"
	r := helmRelease{t: t, cs: cs, agg: agg, ns: ns, name: rel, auditLog: auditLog}

	from := r.auditLines()
	h.run(t, "install", rel, chart, "-n", ns, "--create-namespace", "--wait", "--timeout", helmWait)
	r.checkRevision(h, 1)
	clusterIP := r.checkWeb(2, "hello", "")
	r.checkAPIService()
	r.checkFlundersDiscovered("false") // helm looked before the APIService was made
	r.checkHookRan(from)
	t.Logf("installed: web 2 replicas, service cluster IP %s", clusterIP)

	from = r.auditLines()
	h.run(t, "upgrade", rel, chart, "-n", ns, "--set", "replicas=3", "--set", "greeting=bonjour", "--wait", "--timeout", helmWait)
	r.checkRevision(h, 2)
	r.checkWeb(3, "bonjour", clusterIP)
	r.checkAPIService()
	r.checkFlundersDiscovered("true")
	r.checkHookRan(from)

	from = r.auditLines()
	h.run(t, "rollback", rel, "1", "-n", ns, "--wait", "--timeout", helmWait)
	r.checkRevision(h, 3)
	r.checkWeb(2, "hello", clusterIP)
	r.checkAPIService()
	r.checkFlundersDiscovered("false") // revision 1's manifest, as rendered then
	r.checkHookRan(from)

	h.run(t, "uninstall", rel, "-n", ns, "--wait", "--timeout", helmWait)
	list := []string{"list", "-n", ns, "-o", "json"}
	if h.major == "v3" {
		list = append(list, "--all") // v4 lists releases in every status by default, and has no --all
	}
	if out := strings.TrimSpace(h.run(t, list...)); out != "[]" {
		t.Fatalf("helm list after uninstall: %s", out)
	}
	r.checkGone()
}

// helmCLI is one helm binary and the environment it runs in.
type helmCLI struct {
	major, path string
	env         []string
}

// helmBinary finds Helm major (v3 or v4) where `make test-deps-helm` builds
// it, and checks that it is that major version. Without it the test is
// skipped, or fails under CI=true.
func helmBinary(t *testing.T, major string) *helmCLI {
	t.Helper()
	dir := os.Getenv("SQLKUBE_HELM_DIR")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err != nil {
			t.Fatalf("go env GOPATH: %v", err)
		}
		dir = filepath.Join(filepath.SplitList(strings.TrimSpace(string(out)))[0], "bin")
	}
	p := filepath.Join(dir, "helm-"+major, "helm")
	if !isExecutable(p) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("helm %s not found at %s; CI must build it (make test-deps-helm)", major, p)
		}
		t.Skipf("skipping helm %s: not found at %s (make test-deps-helm builds it)", major, p)
	}
	out, err := exec.Command(p, "version", "--template", "{{.Version}}").Output()
	if err != nil || !strings.HasPrefix(string(out), major+".") {
		t.Fatalf("%s version: %q, %v; want %s", p, out, err, major)
	}
	t.Logf("helm %s (%s)", out, p)
	return &helmCLI{major: major, path: p}
}

// helmEnv is the environment helm runs in: the server's admin
// kubeconfig, and a home, cache, configuration and data directory of its
// own in a temp dir, so that nothing of the user's is read or written.
func helmEnv(t *testing.T, kubeconfig string) []string {
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "HELM_") || strings.HasPrefix(name, "XDG_") || name == "HOME" || name == "KUBECONFIG" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "KUBECONFIG="+kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
}

// run runs helm with args and returns its stdout; a failure ends the
// test with helm's output.
func (h *helmCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.path, args...)
	cmd.Env = h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s %s: %v after %v\nstdout:\n%s\nstderr:\n%s", h.major, strings.Join(args, " "), err,
			time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	}
	if args[0] != "list" && args[0] != "status" {
		t.Logf("helm %s %s: %v", h.major, args[0], time.Since(start).Round(time.Millisecond))
	}
	return stdout.String()
}

// helmRelease checks the objects of one release of the test's chart.
type helmRelease struct {
	t        *testing.T
	cs       kubernetes.Interface
	agg      aggregatorclient.Interface
	ns, name string
	auditLog string
}

const (
	helmAPIService = "v1alpha1.wardle.e2e.example.com"
	helmGroupVer   = "wardle.e2e.example.com/v1alpha1"
	// helmDiscoveredAnnotation on the Deployment says whether helm's
	// discovery listed wardle.e2e.example.com/v1alpha1's Flunder.
	helmDiscoveredAnnotation = "e2e.sqlkube.io/flunders-discovered"
	// helmCheckWait bounds the wait for what the controllers do after a
	// helm command returns (endpoints, garbage collection).
	helmCheckWait = 60 * time.Second
)

// checkRevision checks that helm reports the release deployed at
// revision.
func (r *helmRelease) checkRevision(h *helmCLI, revision int) {
	r.t.Helper()
	out := h.run(r.t, "status", r.name, "-n", r.ns, "-o", "json")
	var st struct {
		Version int `json:"version"`
		Info    struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		r.t.Fatalf("helm status: %v\n%s", err, out)
	}
	if st.Version != revision || st.Info.Status != "deployed" {
		r.t.Fatalf("helm status: revision %d %s, want %d deployed", st.Version, st.Info.Status, revision)
	}
}

// checkWeb checks the Deployment (replicas, all ready and updated, the
// GREETING env var) and its Service: a cluster IP (clusterIP when it is
// not empty: it must not change) and the ready pods as endpoints. It
// returns the cluster IP.
func (r *helmRelease) checkWeb(replicas int32, greeting, clusterIP string) string {
	t := r.t
	t.Helper()
	ctx := context.Background()
	name := r.name + "-web"
	var d *appsv1.Deployment
	waitFor(t, helmCheckWait, fmt.Sprintf("deployment %s: %d replicas ready with GREETING=%s", name, replicas, greeting), func() bool {
		var err error
		if d, err = r.cs.AppsV1().Deployments(r.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("deployment %s: %v", name, err)
		}
		st := d.Status
		return d.Spec.Replicas != nil && *d.Spec.Replicas == replicas && st.ObservedGeneration == d.Generation &&
			st.Replicas == replicas && st.ReadyReplicas == replicas && st.UpdatedReplicas == replicas
	})
	if got := envValue(d.Spec.Template.Spec.Containers[0].Env, "GREETING"); got != greeting {
		t.Fatalf("deployment %s: GREETING=%q, want %q", name, got, greeting)
	}
	svc, err := r.cs.CoreV1().Services(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	if net.ParseIP(svc.Spec.ClusterIP) == nil || !slices.Equal(svc.Spec.ClusterIPs, []string{svc.Spec.ClusterIP}) {
		t.Fatalf("service %s: clusterIP %q, clusterIPs %q: want one cluster IP", name, svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
	}
	if clusterIP != "" && svc.Spec.ClusterIP != clusterIP {
		t.Fatalf("service %s: cluster IP %s, was %s", name, svc.Spec.ClusterIP, clusterIP)
	}
	waitFor(t, helmCheckWait, fmt.Sprintf("%d ready endpoints of service %s", replicas, name), func() bool {
		return r.readyEndpoints(name) == int(replicas)
	})
	return svc.Spec.ClusterIP
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// readyEndpoints counts the ready endpoints of service's EndpointSlices.
func (r *helmRelease) readyEndpoints(service string) int {
	list, err := r.cs.DiscoveryV1().EndpointSlices(r.ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				n += len(e.Addresses)
			}
		}
	}
	return n
}

// checkAPIService checks that the chart's APIService is Available and
// its group-version is served through it.
func (r *helmRelease) checkAPIService() {
	t := r.t
	t.Helper()
	ctx := context.Background()
	var svc *apiregistrationv1.APIService
	waitFor(t, helmCheckWait, "APIService "+helmAPIService+" Available", func() bool {
		var err error
		if svc, err = r.agg.ApiregistrationV1().APIServices().Get(ctx, helmAPIService, metav1.GetOptions{}); err != nil {
			t.Fatalf("APIService %s: %v", helmAPIService, err)
		}
		return apiregistrationhelper.IsAPIServiceConditionTrue(svc, apiregistrationv1.Available)
	})
	if ref := svc.Spec.Service; ref == nil || ref.Namespace != r.ns || ref.Name != "api" {
		t.Fatalf("APIService %s: service %+v", helmAPIService, ref)
	}
	resources, err := r.cs.Discovery().ServerResourcesForGroupVersion(helmGroupVer)
	if err != nil {
		t.Fatalf("discovery of %s: %v", helmGroupVer, err)
	}
	if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "flunders" }) {
		t.Fatalf("discovery of %s: %+v", helmGroupVer, resources.APIResources)
	}
}

// checkFlundersDiscovered checks what the chart rendered from helm's
// discovery (.Capabilities.APIVersions, found before helm writes):
// whether the aggregated group's Flunder kind was listed.
func (r *helmRelease) checkFlundersDiscovered(want string) {
	r.t.Helper()
	d, err := r.cs.AppsV1().Deployments(r.ns).Get(context.Background(), r.name+"-web", metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	if got := d.Annotations[helmDiscoveredAnnotation]; got != want {
		r.t.Fatalf("deployment %s: %s=%q, want %q", d.Name, helmDiscoveredAnnotation, got, want)
	}
}

// checkHookRan checks that since the audit log had from lines, helm
// deleted the hook Job: with hook-delete-policy hook-succeeded it does
// so only once the Job has succeeded, so helm waited for it and the Job
// ran on a simulated node.
func (r *helmRelease) checkHookRan(from int) {
	t := r.t
	t.Helper()
	name := r.name + "-hook"
	waitFor(t, 10*time.Second, "the audit log's delete of job "+name, func() bool {
		return slices.ContainsFunc(r.auditEvents()[from:], func(e auditEvent) bool {
			return e.Verb == "delete" && e.ObjectRef != nil && e.ObjectRef.Resource == "jobs" &&
				e.ObjectRef.Namespace == r.ns && e.ObjectRef.Name == name && e.ResponseStatus.Code == 200
		})
	})
	if _, err := r.cs.BatchV1().Jobs(r.ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("job %s after its hook: %v, want not found", name, err)
	}
}

// checkGone checks that nothing of the release is left: its objects,
// what the controllers made for them (replica sets, pods, endpoint
// slices), its hook Job and helm's release secrets.
func (r *helmRelease) checkGone() {
	t := r.t
	t.Helper()
	ctx := context.Background()
	gets := map[string]func() error{
		"deployment " + r.name + "-web": func() error {
			_, err := r.cs.AppsV1().Deployments(r.ns).Get(ctx, r.name+"-web", metav1.GetOptions{})
			return err
		},
		"service " + r.name + "-web": func() error {
			_, err := r.cs.CoreV1().Services(r.ns).Get(ctx, r.name+"-web", metav1.GetOptions{})
			return err
		},
		"service api": func() error {
			_, err := r.cs.CoreV1().Services(r.ns).Get(ctx, "api", metav1.GetOptions{})
			return err
		},
		"endpointslice api-1": func() error {
			_, err := r.cs.DiscoveryV1().EndpointSlices(r.ns).Get(ctx, "api-1", metav1.GetOptions{})
			return err
		},
		"APIService " + helmAPIService: func() error {
			_, err := r.agg.ApiregistrationV1().APIServices().Get(ctx, helmAPIService, metav1.GetOptions{})
			return err
		},
		"job " + r.name + "-hook": func() error {
			_, err := r.cs.BatchV1().Jobs(r.ns).Get(ctx, r.name+"-hook", metav1.GetOptions{})
			return err
		},
	}
	for what, get := range gets {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("%s after uninstall: %v, want not found", what, err)
		}
	}
	instance := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.name}
	waitFor(t, helmCheckWait, "the release's replica sets, pods and endpoint slices to be gone", func() bool {
		rs, err1 := r.cs.AppsV1().ReplicaSets(r.ns).List(ctx, instance)
		pods, err2 := r.cs.CoreV1().Pods(r.ns).List(ctx, instance)
		eps, err3 := r.cs.DiscoveryV1().EndpointSlices(r.ns).List(ctx, metav1.ListOptions{})
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatal(err1, err2, err3)
		}
		return len(rs.Items) == 0 && len(pods.Items) == 0 && len(eps.Items) == 0
	})
	secrets, err := r.cs.CoreV1().Secrets(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("helm's release secrets after uninstall: %d", len(secrets.Items))
	}
}

// auditEvent is what the test reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
}

// auditEvents reads the complete lines of the audit log.
func (r *helmRelease) auditEvents() []auditEvent {
	return readAuditLog(r.t, r.auditLog)
}

// auditLines is how many events the audit log holds now.
func (r *helmRelease) auditLines() int { return len(r.auditEvents()) }

func readAuditLog(t *testing.T, path string) []auditEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1] // a line being written is read next time
	} else {
		data = nil
	}
	var events []auditEvent
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %d: %v\n%s", len(events)+1, err, sc.Bytes())
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// checkServerHealth fails t if s has exited, logged a panic, or answered
// a request with a 5xx (as its audit log says); it logs how many
// requests helm made.
func checkServerHealth(t *testing.T, s *server, auditLog string) {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for stop
		t.Errorf("sqlkube server exited during the test: %v", err)
	default:
	}
	if lines := panicLines(s); lines != "" {
		t.Errorf("the server's log has a panic:\n%s", lines)
	}
	events := readAuditLog(t, auditLog)
	var fivexx []string
	helm := 0
	for _, e := range events {
		if strings.HasPrefix(strings.ToLower(e.UserAgent), "helm") {
			helm++
		}
		if e.ResponseStatus.Code >= 500 {
			fivexx = append(fivexx, fmt.Sprintf("%s %s %s (%s, %s): %d %s", e.Stage, e.Verb, e.RequestURI, e.User.Username, e.UserAgent,
				e.ResponseStatus.Code, e.ResponseStatus.Message))
		}
	}
	t.Logf("audit log: %d events, %d from helm", len(events), helm)
	if len(fivexx) > 0 {
		t.Errorf("the audit log has %d 5xx responses:\n%s", len(fivexx), strings.Join(fivexx, "\n"))
	}
}

// panicLines is what the server's log says of panics: how many lines
// mention one, and the first three of them, each cut at 4 KiB (a panic
// the server recovers is one JSON line with its stack); "" if none does.
func panicLines(s *server) string {
	lw := s.cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	log := s.stderr.String()
	lw.mu.Unlock()
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "panic") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	first := lines[:min(len(lines), 3)]
	for i, l := range first {
		if len(l) > 4<<10 {
			first[i] = l[:4<<10] + "…"
		}
	}
	return fmt.Sprintf("%d lines; the first:\n%s", len(lines), strings.Join(first, "\n"))
}

// writeHelmChart writes the test's chart into a temp dir and returns its
// path. Its values name the aggregated backend (the test process at ip,
// port, serving with ca, whose certificate names api.wardle.svc: the
// release goes to namespace wardle).
//
// The chart's APIService is backed by a server that answers: the
// test's aggregated backend (kubectl_aggregation_test.go) behind a
// Service without a selector and an EndpointSlice naming it, both in the
// chart. An APIService whose Service has no endpoints would not stop
// helm: it is never Available, aggregated discovery lists its version
// Stale, so client-go's ServerGroupsAndResources reports that group's
// discovery as failed, which helm (v3 and v4 alike) lets pass. Tried by
// hand: install, upgrade and uninstall succeed, helm says nothing of it
// (not even with --debug), the audit log has no 5xx, and .Capabilities
// just lacks the group's kinds. But that shows helm putting up with a
// broken APIService, not an APIService working. With a backend, the
// test holds the server to more: the APIService goes Available, its
// group is served and discoverable after each of helm's writes to it (a
// three-way merge patch from v3, server-side apply from v4), and helm's
// own discovery lists its kind (the Deployment's annotation, rendered
// from .Capabilities).
func writeHelmChart(t *testing.T, ip string, port int, ca []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sqlkube-e2e")
	files := map[string]string{
		"Chart.yaml":                helmChartYAML,
		"values.yaml":               fmt.Sprintf(helmValuesYAML, ip, port, base64.StdEncoding.EncodeToString(ca)),
		"templates/web.yaml":        helmWebTemplate,
		"templates/aggregated.yaml": helmAggregatedTemplate,
		"templates/hook.yaml":       helmHookTemplate,
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, content)
	}
	return dir
}

const helmChartYAML = `apiVersion: v2
name: sqlkube-e2e
description: sqlkube's end-to-end test chart
type: application
version: 0.1.0
appVersion: "1"
`

const helmValuesYAML = `replicas: 2
greeting: hello
image: registry.e2e.example.com/web:1
aggregated:
  ip: %[1]q
  port: %[2]d
  caBundle: %[3]q
`

// helmWebTemplate: a Deployment and a Service that selects its pods.
// The Deployment's annotation tells whether helm's discovery found the
// aggregated group's kind.
const helmWebTemplate = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-web
  labels:
    app.kubernetes.io/name: web
    app.kubernetes.io/instance: {{ .Release.Name }}
  annotations:
    e2e.sqlkube.io/flunders-discovered: {{ .Capabilities.APIVersions.Has "wardle.e2e.example.com/v1alpha1/Flunder" | quote }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels:
      app.kubernetes.io/name: web
      app.kubernetes.io/instance: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: web
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      containers:
        - name: web
          image: {{ .Values.image }}
          env:
            - name: GREETING
              value: {{ .Values.greeting | quote }}
          ports:
            - name: http
              containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}-web
  labels:
    app.kubernetes.io/name: web
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  selector:
    app.kubernetes.io/name: web
    app.kubernetes.io/instance: {{ .Release.Name }}
  ports:
    - name: http
      port: 80
      targetPort: http
`

// helmAggregatedTemplate: an APIService for wardle.e2e.example.com
// served by a backend outside the cluster, reached through a Service
// without a selector and an EndpointSlice that names the backend. The
// Service is named as the backend's certificate says (api, in the
// release's namespace).
const helmAggregatedTemplate = `apiVersion: v1
kind: Service
metadata:
  name: api
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  ports:
    - name: https
      port: 443
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-1
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
    kubernetes.io/service-name: api
addressType: IPv4
endpoints:
  - addresses: [{{ .Values.aggregated.ip | quote }}]
    conditions:
      ready: true
ports:
  - name: https
    port: {{ .Values.aggregated.port }}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1alpha1.wardle.e2e.example.com
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  group: wardle.e2e.example.com
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service:
    name: api
    namespace: {{ .Release.Namespace }}
    port: 443
  caBundle: {{ .Values.aggregated.caBundle }}
`

// helmHookTemplate: a Job run after install, upgrade and rollback. On
// simulated nodes a Job's pod succeeds a second after it starts
// (node/fake.JobPodRuntime), so helm, which waits for a hook Job to
// complete, goes on; it deletes the Job once it has succeeded, and any
// left from an earlier run before making it again.
const helmHookTemplate = `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-hook
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
  annotations:
    helm.sh/hook: post-install,post-upgrade,post-rollback
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      restartPolicy: Never
      containers:
        - name: hook
          image: {{ .Values.image }}
          command: ["true"]
`
