package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/internal/testport"
)

// freeTCPPort is a port the OS says is free now (the test's own
// components' endpoints: upstream's fixed ports may be taken).
func freeTCPPort(t *testing.T) int { return testport.Free(t) }

// adminTLS is the cluster CA and the client certificate of the admin
// kubeconfig cfg, inline or in files.
func adminTLS(t *testing.T, cfg *rest.Config) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.TLSClientConfig.CAData) {
		ca, err := os.ReadFile(cfg.TLSClientConfig.CAFile)
		if err != nil || !roots.AppendCertsFromPEM(ca) {
			t.Fatalf("the admin kubeconfig's CA: %v", err)
		}
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile)
	if err != nil {
		if cert, err = tls.X509KeyPair(cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData); err != nil {
			t.Fatalf("the admin kubeconfig's client certificate: %v", err)
		}
	}
	return roots, cert
}

// TestServer_ComponentEndpoints checks the in-process controller manager's
// and scheduler's own HTTPS endpoints, as kube-controller-manager's
// (10257) and kube-scheduler's (10259): a certificate of the cluster CA;
// /healthz open to all; /metrics refused to anonymous callers and to a
// service account RBAC does not let read it, served to the admin and to a
// service account bound to a ClusterRole with `get` on /metrics (as
// Prometheus is); each component's families there and nowhere else.
func TestServer_ComponentEndpoints(t *testing.T) {
	kcmPort, schedPort := freeTCPPort(t), freeTCPPort(t)
	cfg := startTestServer(t,
		"--kube-controller-manager-arg=--secure-port="+strconv.Itoa(kcmPort), "--kube-controller-manager-arg=--bind-address=127.0.0.1",
		"--kube-scheduler-arg=--secure-port="+strconv.Itoa(schedPort), "--kube-scheduler-arg=--bind-address=127.0.0.1")
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	roots, adminCert := adminTLS(t, cfg)
	// get fetches path from the endpoint on port, verifying its
	// certificate with the cluster CA, as certs (a client certificate)
	// or token say.
	get := func(port int, path string, certs []tls.Certificate, token string) (int, string) {
		t.Helper()
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs},
		}}
		defer client.CloseIdleConnections()
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", port, path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s on %d: %v", path, port, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}

	// Service accounts: one RBAC lets read /metrics, as the
	// kube-prometheus-stack chart's Prometheus, and one it does not.
	ns := "monitoring"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"prometheus", "nobody"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	promToken, nobodyToken := token("prometheus"), token("nobody")

	families := map[string]map[string]*dto.MetricFamily{} // endpoint → its families
	for _, ep := range []struct {
		name string
		port int
	}{{"kube-controller-manager", kcmPort}, {"kube-scheduler", schedPort}} {
		t.Run(ep.name, func(t *testing.T) {
			if code, body := get(ep.port, "/healthz", nil, ""); code != http.StatusOK || body != "ok" {
				t.Errorf("anonymous GET /healthz: %d %q, want 200 ok", code, body)
			}
			if code, body := get(ep.port, "/metrics", nil, ""); code != http.StatusForbidden {
				t.Errorf("anonymous GET /metrics: %d %q, want 403 (system:anonymous may not)", code, body)
			}
			if code, body := get(ep.port, "/metrics", nil, "not-a-token"); code != http.StatusUnauthorized {
				t.Errorf("GET /metrics with a bad token: %d %q, want 401", code, body)
			}
			if code, body := get(ep.port, "/metrics", nil, nobodyToken); code != http.StatusForbidden {
				t.Errorf("GET /metrics as a service account RBAC does not let: %d %q, want 403", code, body)
			}
			if code, _ := get(ep.port, "/metrics", []tls.Certificate{adminCert}, ""); code != http.StatusOK {
				t.Errorf("GET /metrics as the admin (client certificate): %d, want 200", code)
			}
			// Until the component has registered its families (the
			// scheduler's at its start), its endpoint may serve fewer.
			mark := map[string]string{"kube-controller-manager": "\nworkqueue_adds_total", "kube-scheduler": "\nscheduler_pending_pods"}[ep.name]
			var body string
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				var code int
				code, body = get(ep.port, "/metrics", nil, promToken)
				if code != http.StatusOK {
					return false, fmt.Errorf("GET /metrics as a service account with get on /metrics: %d %q, want 200", code, body)
				}
				return strings.Contains(body, mark), nil
			})
			if err != nil {
				t.Fatalf("%s: %v", ep.name, err)
			}
			families[ep.name] = parseFamilies(t, body)
		})
	}
	apiBody, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	families["kube-apiserver"] = parseFamilies(t, string(apiBody))

	// Each component's families where upstream serves them, and each
	// series on one endpoint only: each family but client-go's
	// rest_client_*, whose series each endpoint serves for its own
	// component's client (by their host label).
	want := map[string][]string{
		"kube-apiserver":          {"apiserver_request_total", "apiserver_request_duration_seconds", "go_goroutines", "process_resident_memory_bytes", "rest_client_requests_total"},
		"kube-controller-manager": {"workqueue_adds_total", "workqueue_depth", "workqueue_queue_duration_seconds", "rest_client_requests_total"},
		"kube-scheduler":          {"scheduler_pending_pods", "rest_client_requests_total"},
	}
	for ep, names := range want {
		for _, name := range names {
			if families[ep][name] == nil {
				t.Errorf("%s's endpoint does not serve %s", ep, name)
			}
		}
	}
	// A component's endpoint serves its own client's series; the API
	// server's every other client's of the process (its loopback's, the
	// node's, ...).
	componentHost := map[string]bool{"kube-controller-manager.loopback": true, "kube-scheduler.loopback": true}
	hostOK := func(ep, host string) bool {
		if ep == "kube-apiserver" {
			return !componentHost[host]
		}
		return host == ep+".loopback"
	}
	hosts := map[string]bool{}
	seenFamily, seenSeries := map[string]string{}, map[string]string{}
	for ep, fams := range families {
		if len(fams) == 0 {
			t.Errorf("%s's endpoint serves no family", ep)
		}
		for name, mf := range fams {
			if other, ok := seenFamily[name]; ok && !strings.HasPrefix(name, "rest_client_") {
				t.Errorf("%s is served by %s and %s", name, other, ep)
			}
			seenFamily[name] = ep
			for _, m := range mf.GetMetric() {
				key := name
				for _, l := range m.GetLabel() {
					key += "," + l.GetName() + "=" + l.GetValue()
					if name == "rest_client_requests_total" && l.GetName() == "host" {
						if !hostOK(ep, l.GetValue()) {
							t.Errorf("%s's endpoint serves %s of host %s", ep, name, l.GetValue())
						}
						hosts[ep+" "+l.GetValue()] = true
					}
				}
				if other, ok := seenSeries[key]; ok {
					t.Errorf("series %s is served by %s and %s", key, other, ep)
				}
				seenSeries[key] = ep
			}
		}
	}
	for _, want := range []string{"kube-apiserver loopback", "kube-controller-manager kube-controller-manager.loopback", "kube-scheduler kube-scheduler.loopback"} {
		if !hosts[want] {
			t.Errorf("no rest_client_requests_total series of %s (have %v)", want, hosts)
		}
	}
}

// parseFamilies are the metric families of a Prometheus text body, by
// name.
func parseFamilies(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}
