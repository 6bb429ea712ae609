package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

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
