package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sqlkube/sqlkube/monitoring/mixin"
)

// The versions `make test-deps-prometheus` builds (PROMETHEUS_VERSION and
// KSM_VERSION in the Makefile), each into a directory of its own.
const (
	prometheusVersion = "v0.316.0"
	ksmVersion        = "v2.18.0"
)

// mixinRecordingGroups are the recording groups issue 40 asks to return
// series against a sqlkube server with its node: the API server's
// availability, burn rates and latency histogram, the scheduler's and the
// kubelet's, and k8s.rules (container CPU and memory per pod, requests,
// limits and owners). node.rules is not among them: it needs
// node-exporter.
func mixinRecordingGroups(name string) bool {
	switch name {
	case "kube-apiserver-availability.rules", "kube-apiserver-burnrate.rules", "kube-apiserver-histogram.rules",
		"kube-scheduler.rules", "kubelet.rules":
		return true
	}
	return strings.HasPrefix(name, "k8s.rules.")
}

// TestPrometheus_Mixin is kube-prometheus-stack's monitoring of a cluster,
// run against `sqlkube server` with its real node: a Prometheus
// (PROMETHEUS_VERSION, built from the module proxy) with the
// kubernetes-mixin control-plane rules kube-prometheus ships
// (monitoring/mixin, loaded as they are but for their evaluation
// interval: every group is evaluated every 2 s instead of every 1 to 3
// minutes, so that the test waits seconds) and kube-state-metrics beside
// it, scraping the API server, the kubelet's /metrics and
// /metrics/cadvisor, the scheduler's and the controller manager's own
// endpoints, as kube-prometheus' ServiceMonitors do (job names,
// metrics_path label, honor_labels), while pods run. Prometheus reads with
// a service account's token, with the permissions kube-prometheus-stack's
// ClusterRole gives its Prometheus. It checks that:
//   - every target is up, and no Down or InstanceUnreachable alert is
//     pending or firing once the alerts have been evaluated with every
//     target up;
//   - every recording rule of mixinRecordingGroups returns series (the
//     burn rates need a read and a write answered 5xx, which the test
//     causes as clients do: a LIST at a resource version the server has
//     not reached, 504, and a create that a failing webhook refuses, 500);
//   - no rule of the file fails to evaluate (a many-to-many match, which
//     series served twice would cause, is an evaluation error);
//   - the admin kubeconfig's user reads each of those endpoints, and a
//     caller without credentials none, as upstream answers it;
//   - no series is served by two targets of one process: the API server,
//     the scheduler and the controller manager share sqlkube's process;
//     the kubelet's two paths share its process; and each component's
//     target serves its own client's rest_client_requests_total.
//
// The workload is runOwnedPods': a Deployment behind a Service and a pod
// of every owner kind the pod_owner rules tell apart.
func TestPrometheus_Mixin(t *testing.T) {
	requireNodeHost(t)
	promDir := testToolDir(t, "SQLKUBE_PROMETHEUS_DIR", "prometheus-"+prometheusVersion)
	prometheus := requireTestTool(t, filepath.Join(promDir, "prometheus"), "make test-deps-prometheus")
	ksm := requireTestTool(t, filepath.Join(testToolDir(t, "SQLKUBE_KSM_DIR", "kube-state-metrics-"+ksmVersion), "kube-state-metrics"), "make test-deps-prometheus")

	start := time.Now()
	dir := t.TempDir()
	node := "e2e-prom"
	schedPort, kcmPort := freePort(t), freePort(t)
	s := startNodeServer(t, filepath.Join(dir, "data"), node,
		"--kube-scheduler-arg=--bind-address=127.0.0.1", "--kube-scheduler-arg=--secure-port="+strconv.Itoa(schedPort),
		"--kube-controller-manager-arg=--bind-address=127.0.0.1", "--kube-controller-manager-arg=--secure-port="+strconv.Itoa(kcmPort))
	cs := s.clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// Prometheus reads as kube-prometheus-stack's does: with a service
	// account's token, which its ClusterRole lets read /metrics and the
	// kubelets' metrics, and the cluster CA.
	cfg := s.restConfig(t, s.kubeconfig)
	if len(cfg.CAData) == 0 {
		t.Fatal("the admin kubeconfig has no inline CA")
	}
	writeFile(t, filepath.Join(dir, "ca.crt"), string(cfg.CAData))
	writeFile(t, filepath.Join(dir, "token"), prometheusToken(ctx, t, cs))
	apiURL, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodeIP string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	kubelet := net.JoinHostPort(nodeIP, strconv.Itoa(int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)))

	// kube-state-metrics, as the admin.
	ksmPort, ksmTelemetryPort := freePort(t), freePort(t)
	startTestProcess(t, filepath.Join(dir, "kube-state-metrics.log"), ksm, "--kubeconfig", s.kubeconfig,
		"--host", "127.0.0.1", "--port", strconv.Itoa(ksmPort),
		"--telemetry-host", "127.0.0.1", "--telemetry-port", strconv.Itoa(ksmTelemetryPort))

	// Prometheus.
	rules := filepath.Join(dir, "rules.yaml")
	writeFile(t, rules, string(rulesEveryEvaluation(t)))
	httpsJob := func(job string, targets ...map[string]any) map[string]any {
		return map[string]any{"job_name": job, "scheme": "https", "static_configs": targets,
			"tls_config":    map[string]any{"ca_file": filepath.Join(dir, "ca.crt")},
			"authorization": map[string]any{"type": "Bearer", "credentials_file": filepath.Join(dir, "token")}}
	}
	target := func(addr string, labels map[string]string) map[string]any {
		return map[string]any{"targets": []string{addr}, "labels": labels}
	}
	kubeletJob := httpsJob("kubelet",
		target(kubelet, map[string]string{"__metrics_path__": "/metrics"}),
		target(kubelet, map[string]string{"__metrics_path__": "/metrics/cadvisor"}))
	// As kube-prometheus' kubelet ServiceMonitor: cAdvisor's own
	// namespace, pod and container labels are kept, and the path is a
	// label the rules select on.
	kubeletJob["honor_labels"] = true
	kubeletJob["relabel_configs"] = []map[string]any{{"source_labels": []string{"__metrics_path__"}, "target_label": "metrics_path"}}
	ksmJob := map[string]any{"job_name": "kube-state-metrics", "honor_labels": true,
		"static_configs": []map[string]any{target("127.0.0.1:"+strconv.Itoa(ksmPort), nil)}}
	promConfig := map[string]any{
		"global":     map[string]any{"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"},
		"rule_files": []string{rules},
		"scrape_configs": []map[string]any{
			httpsJob("apiserver", target(apiURL.Host, nil)),
			kubeletJob,
			httpsJob("kube-scheduler", target("127.0.0.1:"+strconv.Itoa(schedPort), nil)),
			httpsJob("kube-controller-manager", target("127.0.0.1:"+strconv.Itoa(kcmPort), nil)),
			ksmJob,
		},
	}
	body, err := yaml.Marshal(promConfig)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "prometheus.yml"), string(body))
	promPort := freePort(t)
	startTestProcess(t, filepath.Join(dir, "prometheus.log"), prometheus,
		"--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "tsdb"),
		"--web.listen-address", "127.0.0.1:"+strconv.Itoa(promPort), "--log.level", "warn")
	prom := &promAPI{t: t, base: "http://127.0.0.1:" + strconv.Itoa(promPort)}

	t.Logf("server with its node ready after %s", time.Since(start).Round(time.Second))
	runOwnedPods(ctx, t, s, node, cs)
	t.Logf("8 pods running after %s", time.Since(start).Round(time.Second))

	causeServerErrors(ctx, t, cs)

	// Every target up.
	var upSince time.Time
	logged := map[string]bool{}
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var targets struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				ScrapeURL string            `json:"scrapeUrl"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		prom.get("/api/v1/targets", nil, &targets)
		up := 0
		for _, tg := range targets.ActiveTargets {
			if tg.Health == "up" {
				up++
			} else if msg := fmt.Sprintf("target %s (job %s): %s", tg.ScrapeURL, tg.Labels["job"], tg.LastError); tg.Health == "down" && !logged[msg] {
				logged[msg] = true
				t.Log(msg)
			}
		}
		return up == 6 && len(targets.ActiveTargets) == 6, nil
	})
	if err != nil {
		t.Fatalf("not every target is up: %v", err)
	}
	upSince = time.Now()
	t.Logf("every target up after %s", time.Since(start).Round(time.Second))

	// As upstream, the admin kubeconfig's user reads every endpoint
	// Prometheus scrapes, and a caller without credentials none: 403 from
	// the API server and the components (system:anonymous, whom RBAC
	// lets read only the health paths), 401 from the kubelet (anonymous
	// requests off, as kubeadm's kubelets).
	checkEndpointAccess(t, cfg, map[string]int{
		cfg.Host + "/metrics": http.StatusForbidden,
		"https://127.0.0.1:" + strconv.Itoa(schedPort) + "/metrics": http.StatusForbidden,
		"https://127.0.0.1:" + strconv.Itoa(kcmPort) + "/metrics":   http.StatusForbidden,
		"https://" + kubelet + "/metrics":                           http.StatusUnauthorized,
		"https://" + kubelet + "/metrics/cadvisor":                  http.StatusUnauthorized,
	})

	// Every recording rule asked for returns series, and no rule fails.
	var missing, failing []string
	err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		missing, failing = nil, nil
		groups := prom.rules()
		evaluatedSince := 0
		for _, g := range groups {
			if g.LastEvaluation.After(upSince) {
				evaluatedSince++
			}
			for _, r := range g.Rules {
				if r.Health == "err" {
					failing = append(failing, fmt.Sprintf("%s %s%s: %s", g.Name, r.Name, r.Labels, r.LastError))
				}
				if r.Type != "recording" || !mixinRecordingGroups(g.Name) {
					continue
				}
				if len(prom.query(seriesSelector(r.Name, r.Labels))) == 0 {
					missing = append(missing, fmt.Sprintf("%s %s%s", g.Name, r.Name, r.Labels))
				}
			}
		}
		return evaluatedSince == len(groups) && len(missing) == 0, nil
	})
	if len(failing) > 0 {
		t.Errorf("rules that fail to evaluate:\n%s", strings.Join(failing, "\n"))
	}
	if err != nil {
		t.Fatalf("recording rules without series (%v):\n%s", err, strings.Join(missing, "\n"))
	}

	t.Logf("every recording rule asked for has series after %s", time.Since(start).Round(time.Second))

	// No Down or InstanceUnreachable alert, after the alerting rules have
	// been evaluated with every target up (above: every group's last
	// evaluation is since).
	var alerts struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	prom.get("/api/v1/alerts", nil, &alerts)
	for _, a := range alerts.Alerts {
		name := a.Labels["alertname"]
		if strings.HasSuffix(name, "Down") || strings.HasSuffix(name, "InstanceUnreachable") {
			t.Errorf("alert %s is %s: %v", name, a.State, a.Labels)
		} else {
			t.Logf("alert %s is %s", name, a.State)
		}
	}

	// No series on two targets of one process: the same name and labels
	// but for the target's own (job and instance for the API server, the
	// scheduler and the controller manager, all in sqlkube's process;
	// metrics_path for the kubelet's two paths). Prometheus' own series
	// (up, scrape_*) are every target's.
	// Aggregation drops the metric name, which a label keeps here.
	for _, q := range []string{
		`count without (job, instance) (label_replace({__name__!~"up|scrape_.+", job=~"apiserver|kube-scheduler|kube-controller-manager"}, "e2e_family", "$1", "__name__", "(.+)")) > 1`,
		`count without (metrics_path) (label_replace({__name__!~"up|scrape_.+", job="kubelet"}, "e2e_family", "$1", "__name__", "(.+)")) > 1`,
	} {
		for _, sample := range prom.query(q) {
			t.Errorf("served by more than one target of one process: %v", sample.Metric)
		}
	}
	// The same query finds series that two processes serve, which is
	// right for theirs: the API server's and the kubelet's goroutines.
	if n := len(prom.query(`count without (job, instance, metrics_path) (label_replace({__name__="go_goroutines", job=~"apiserver|kubelet"}, "e2e_family", "$1", "__name__", "(.+)")) > 1`)); n != 1 {
		t.Errorf("the API server's and the kubelet's go_goroutines without their target labels: %d series of count 2, want 1", n)
	}
	// client-go's request metrics: each component's on its own target.
	for _, job := range []string{"apiserver", "kube-scheduler", "kube-controller-manager"} {
		if len(prom.query(`rest_client_requests_total{job="`+job+`"}`)) == 0 {
			t.Errorf("no rest_client_requests_total from %s", job)
		}
	}
}

// runOwnedPods runs, in namespace default, the workload the test watches:
// a Deployment of two pods with requests and limits behind a Service, and
// a pod of every other owner k8s.rules.pod_owner tells apart (a
// ReplicaSet of its own, a DaemonSet, a StatefulSet, a Job, none, and the
// node for a static pod, on node), and waits until all eight run.
func runOwnedPods(ctx context.Context, t *testing.T, s *server, node string, cs kubernetes.Interface) {
	t.Helper()
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: app, Image: testImage, Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
			}}},
		}
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
	apps := cs.AppsV1()
	errs := []error{}
	_, err := apps.Deployments("default").Create(ctx, &appsv1.Deployment{ObjectMeta: meta("web"),
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: selector("web"), Template: template("web")}}, metav1.CreateOptions{})
	errs = append(errs, err)
	_, err = cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: meta("web"),
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	errs = append(errs, err)
	_, err = apps.ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta("lone"),
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: selector("lone"), Template: template("lone")}}, metav1.CreateOptions{})
	errs = append(errs, err)
	_, err = apps.DaemonSets("default").Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta("agent"),
		Spec: appsv1.DaemonSetSpec{Selector: selector("agent"), Template: template("agent")}}, metav1.CreateOptions{})
	errs = append(errs, err)
	_, err = apps.StatefulSets("default").Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta("db"),
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "web", Selector: selector("db"), Template: template("db")}}, metav1.CreateOptions{})
	errs = append(errs, err)
	job := template("batch")
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	_, err = cs.BatchV1().Jobs("default").Create(ctx, &batchv1.Job{ObjectMeta: meta("batch"), Spec: batchv1.JobSpec{Template: job}}, metav1.CreateOptions{})
	errs = append(errs, err)
	bare := template("bare")
	_, err = cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Labels: bare.Labels}, Spec: bare.Spec}, metav1.CreateOptions{})
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// A static pod, which the API shows as a mirror pod the node owns.
	manifests := filepath.Join(s.dataDir, "node", "pod-manifests")
	if err := os.MkdirAll(manifests, 0o700); err != nil {
		t.Fatal(err)
	}
	static := filepath.Join(manifests, "static.yaml")
	writeFile(t, static, "apiVersion: v1\nkind: Pod\nmetadata: {name: static, namespace: default}\n"+
		"spec:\n  containers:\n  - {name: static, image: "+testImage+", command: [sleep, \"3600\"]}\n")
	// The kubelet stops a static pod when its manifest goes, not when the
	// API deletes its mirror: before the server stops, remove the
	// manifest and wait for the mirror pod to go.
	mirror := "static-" + node
	t.Cleanup(func() {
		removed := time.Now()
		if err := os.Remove(static); err != nil {
			t.Error(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods("default").Get(ctx, mirror, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("the static pod's mirror %s is still there: %v", mirror, err)
		}
		t.Logf("the static pod's mirror gone in %s", time.Since(removed).Round(time.Second))
	})

	var running int
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running = 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 8, nil
	})
	if err != nil {
		t.Fatalf("%d of 8 pods running: %v", running, err)
	}
}

// prometheusToken makes the service account kube-prometheus-stack's
// Prometheus runs as, with the permissions its ClusterRole gives it (read
// nodes, their metrics, services, endpoints and pods; get /metrics and
// /metrics/cadvisor), and returns a token of it.
func prometheusToken(ctx context.Context, t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ns := "monitoring"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	read := []string{"get", "list", "watch"}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/metrics", "services", "endpoints", "pods"}, Verbs: read},
			{NonResourceURLs: []string{"/metrics", "/metrics/cadvisor"}, Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "prometheus"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "prometheus", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// checkEndpointAccess GETs each URL with the admin kubeconfig's client
// certificate, which must be answered 200, and without credentials, which
// must be answered with the code given.
func checkEndpointAccess(t *testing.T, cfg *rest.Config, anonymous map[string]int) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.CAData) {
		t.Fatal("the admin kubeconfig's CA does not parse")
	}
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatalf("the admin kubeconfig's client certificate: %v", err)
	}
	for _, admin := range []bool{true, false} {
		tc := &tls.Config{RootCAs: roots}
		if admin {
			tc.Certificates = []tls.Certificate{cert}
		}
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		for u, code := range anonymous {
			if admin {
				code = http.StatusOK
			}
			resp, err := client.Get(u)
			if err != nil {
				t.Errorf("GET %s: %v", u, err)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != code {
				t.Errorf("GET %s (admin %v): %d, want %d", u, admin, resp.StatusCode, code)
			}
		}
		client.CloseIdleConnections()
	}
}

// causeServerErrors makes the API server answer a read and a write with
// a 5xx, as clients meet them, so that the burn-rate rules, whose error
// terms have no fallback, record a value: a namespaced LIST at a
// resource version far beyond the server's, which the watch cache waits
// for and then answers 504 (Too large resource version, as
// kube-apiserver), and a create that a validating webhook with
// failurePolicy Fail refuses because it cannot be reached (500); the
// webhook is then removed. Reads of one object, namespaced and
// cluster-wide lists happen on their own (the kubelet, the controllers,
// kube-state-metrics).
func causeServerErrors(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	// One attempt: client-go would retry it as the Retry-After asks.
	err := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").
		Param("resourceVersion", "999999999").Param("resourceVersionMatch", string(metav1.ResourceVersionMatchNotOlderThan)).
		MaxRetries(0).Do(ctx).Error()
	if !apierrors.IsTimeout(err) {
		t.Fatalf("LIST at a resource version the server has not reached: %v, want 504", err)
	}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	closed := "https://127.0.0.1:" + strconv.Itoa(freePort(t)) + "/validate"
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "unreachable"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "unreachable.e2e.sqlkube.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &closed},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": "refused"}},
			FailurePolicy:  &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "refused-", Labels: map[string]string{"e2e": "refused"}},
		}, metav1.CreateOptions{})
		if err == nil {
			return false, nil // the webhook is not in force yet
		}
		if !apierrors.IsInternalError(err) {
			return false, fmt.Errorf("create refused by an unreachable webhook: %w, want 500", err)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "unreachable", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rulesEveryEvaluation is mixin.Rules with each group's own evaluation
// interval removed, so that the global one applies.
func rulesEveryEvaluation(t *testing.T) []byte {
	t.Helper()
	var f map[string]any
	if err := yaml.Unmarshal(mixin.Rules, &f); err != nil {
		t.Fatal(err)
	}
	groups, _ := f["groups"].([]any)
	if len(groups) == 0 {
		t.Fatal("the mixin's rules have no groups")
	}
	for _, g := range groups {
		delete(g.(map[string]any), "interval")
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seriesSelector selects the series of name with labels.
func seriesSelector(name string, labels map[string]string) string {
	matchers := []string{fmt.Sprintf("__name__=%q", name)}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		matchers = append(matchers, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return "{" + strings.Join(matchers, ",") + "}"
}

// promAPI reads Prometheus' HTTP API.
type promAPI struct {
	t    *testing.T
	base string
}

// get reads path's data into v.
func (p *promAPI) get(path string, query url.Values, v any) {
	p.t.Helper()
	u := p.base + path
	if query != nil {
		u += "?" + query.Encode()
	}
	resp, err := http.Get(u)
	if err != nil {
		p.t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		p.t.Fatalf("GET %s: %d %s (%v)", u, resp.StatusCode, body, err)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		p.t.Fatalf("GET %s: %v", u, err)
	}
}

// promSample is one series of an instant query's vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
}

// query runs an instant query.
func (p *promAPI) query(q string) []promSample {
	p.t.Helper()
	var data struct {
		ResultType string       `json:"resultType"`
		Result     []promSample `json:"result"`
	}
	p.get("/api/v1/query", url.Values{"query": {q}}, &data)
	if data.ResultType != "vector" {
		p.t.Fatalf("query %s: a %s, want a vector", q, data.ResultType)
	}
	return data.Result
}

// promGroup is a rule group as /api/v1/rules reports it.
type promGroup struct {
	Name           string    `json:"name"`
	LastEvaluation time.Time `json:"lastEvaluation"`
	Rules          []struct {
		Name      string            `json:"name"`
		Type      string            `json:"type"`
		Labels    map[string]string `json:"labels"`
		Health    string            `json:"health"`
		LastError string            `json:"lastError"`
	} `json:"rules"`
}

// rules lists the loaded rule groups.
func (p *promAPI) rules() []promGroup {
	p.t.Helper()
	var data struct {
		Groups []promGroup `json:"groups"`
	}
	p.get("/api/v1/rules", nil, &data)
	return data.Groups
}

// startTestProcess runs bin with args until the test ends (SIGTERM, then
// a wait), its output in logFile, which a failed test prints the end of.
func startTestProcess(t *testing.T, logFile, bin string, args ...string) {
	t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logFile); err == nil {
				if len(out) > 4000 {
					out = out[len(out)-4000:]
				}
				t.Logf("%s's output (end):\n%s", filepath.Base(bin), out)
			}
		}
	})
}

// requireTestTool returns path if it is an executable; else the test is
// skipped with a line, or fails under CI=true.
func requireTestTool(t *testing.T, path, build string) string {
	t.Helper()
	if !isExecutable(path) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found; CI must build it (%s)", path, build)
		}
		t.Skipf("skipping: %s not found (%s builds it)", path, build)
	}
	return path
}
