package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/component-base/metrics/legacyregistry"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/internal/stablemetrics"
)

// notProduced are the API server's stable and beta metrics that the
// scenario of TestMetrics_StableAndBeta cannot produce, and why.
var notProduced = map[string]string{
	"apiserver_flowcontrol_current_executing_requests":                                   noAPF,
	"apiserver_flowcontrol_current_executing_seats":                                      noAPF,
	"apiserver_flowcontrol_current_inqueue_requests":                                     noAPF,
	"apiserver_flowcontrol_dispatched_requests_total":                                    noAPF,
	"apiserver_flowcontrol_nominal_limit_seats":                                          noAPF,
	"apiserver_flowcontrol_rejected_requests_total":                                      noAPF,
	"apiserver_flowcontrol_request_wait_duration_seconds":                                noAPF,
	"apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds": noConfigFile,
	"apiserver_authentication_config_controller_automatic_reloads_total":                 noConfigFile,
	"apiserver_authorization_config_controller_automatic_reload_last_timestamp_seconds":  noConfigFile,
	"apiserver_authorization_config_controller_automatic_reloads_total":                  noConfigFile,
	"kubernetes_healthcheck":                                                             noSLIs,
	"kubernetes_healthchecks_total":                                                      noSLIs,
}

// unavailableAPIService is TestMetrics_StableAndBeta's APIService whose
// service does not exist.
const unavailableAPIService = "v1beta1.missing.example.com"

const (
	noAPF        = "sqlkube has no API Priority and Fairness: requests are bounded by the max-in-flight limiter (apiserver_current_inflight_requests)"
	noConfigFile = "sqlkube has no --authentication-config / --authorization-config file to reload"
	noSLIs       = "kube-apiserver serves it on /metrics/slis, not on /metrics; sqlkube has no /metrics/slis"
)

// metricsServer serves the API over TLS with client-certificate and
// service-account authentication and in-flight limits; it returns the
// admin's client configuration (a client certificate).
func metricsServer(t *testing.T) (*rest.Config, *apiserver.Server) {
	t.Helper()
	files, err := pki.Ensure(filepath.Join(t.TempDir(), "tls"), pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Client: newStorage(t), Logger: zerolog.Nop(), Authenticate: true, ServiceAccountKey: key,
		MaxRequestsInflight: 400, MaxMutatingRequestsInflight: 200, DisableAdmissionPlugins: []string{"ServiceAccount"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(context.Background()); err != nil {
		api.Close()
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(files.ServingCert, files.ServingKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs, err := certutil.NewPool(files.ClientCACert)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(api.Handler())
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: clientCAs, ClientAuth: tls.VerifyClientCertIfGiven}
	hs.StartTLS()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		api.Close()
	})
	return &rest.Config{Host: hs.URL, TLSClientConfig: rest.TLSClientConfig{
		CAFile: files.CACert, CertFile: files.AdminCert, KeyFile: files.AdminKey,
	}}, api
}

// scrape reads the server's /metrics.
func scrape(t *testing.T, cs kubernetes.Interface) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// TestMetrics_StableAndBeta checks that the API server's /metrics serves
// every stable and beta metric Kubernetes declares for the API server
// (stablemetrics.List), and the SLI latency histogram, with its type,
// labels and buckets, after a
// scenario that exercises them: creates, gets, lists, a watch and a
// watch-list, a server-side apply, a deprecated API version, a
// validating webhook and admission policy, requests with a client
// certificate and with a service-account token.
func TestMetrics_StableAndBeta(t *testing.T) {
	declared, source, ok := stablemetrics.List(t, stablemetrics.APIServer)
	if !ok {
		t.Skip("k8s.io/kubernetes is not in the module cache")
	}
	t.Logf("stable and beta metrics from %s", source)
	ctx := context.Background()
	cfg, _ := metricsServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	deprecated := exerciseAPI(t, cs, cfg)
	// An APIService whose service is missing: unavailable.
	ac := aggregatorclient.NewForConfigOrDie(cfg)
	gone := wardleAPIService("v1beta1", nil)
	gone.Name, gone.Spec.Group, gone.Spec.Service.Name = unavailableAPIService, "missing.example.com", "nowhere"
	gone.Spec.InsecureSkipTLSVerify = true
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, gone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, ac, unavailableAPIService, apiregistrationv1.ConditionFalse, "")

	var want []stablemetrics.Metric
	for _, m := range declared {
		if _, skip := notProduced[m.Name]; !skip && (m.Name != "apiserver_requested_deprecated_apis" || deprecated != "") {
			want = append(want, m)
		}
	}
	if !slices.ContainsFunc(want, func(m stablemetrics.Metric) bool { return m.Name == "apiserver_request_sli_duration_seconds" }) {
		t.Logf("apiserver_request_sli_duration_seconds is not on the list (%s): not checked", source)
	}
	t.Logf("checking %d metrics", len(want))
	// Object counts, the database size and the in-flight peaks are
	// published apart from the requests, and a watch is counted once it
	// has ended: the scenario's ended as it returned, but the server may
	// not have seen them end yet.
	var mfs map[string]*dto.MetricFamily
	var missing []string
	err := pollUntil(ctx, func() bool {
		mfs, missing = scrape(t, cs), nil
		for _, m := range want {
			if mfs[m.Name] == nil {
				missing = append(missing, m.Name)
			}
		}
		if !hasSeries(mfs["apiserver_request_total"], map[string]string{"verb": "WATCH", "resource": "configmaps", "component": "apiserver"}) {
			missing = append(missing, "apiserver_request_total{verb=WATCH,resource=configmaps}")
		}
		return len(missing) == 0
	})
	if err != nil {
		t.Fatalf("/metrics lacks %v", missing)
	}
	for _, m := range want {
		stablemetrics.Check(t, m, mfs[m.Name])
	}
	for name, reason := range notProduced {
		if mfs[name] != nil {
			t.Errorf("%s is served, though listed as not produced (%s)", name, reason)
		}
	}
	if deprecated == "" {
		t.Logf("apiserver_requested_deprecated_apis not checked: no deprecated API version is served")
	} else {
		t.Logf("deprecated API read: %s", deprecated)
	}
	all, _ := legacyregistry.DefaultGatherer.Gather()
	var others []string
	for _, mf := range all {
		if mfs[mf.GetName()] == nil {
			others = append(others, mf.GetName())
		}
	}
	t.Logf("/metrics serves %d families; the process registry holds %d more, not the API server's: %v", len(mfs), len(others), others)

	// Verbs as kube-apiserver reports them: its routes' HTTP verbs (a
	// create is a POST), LIST apart from GET, WATCH, APPLY apart from
	// PATCH.
	verbs := map[string]bool{}
	for _, s := range mfs["apiserver_request_total"].GetMetric() {
		if labelOf(s, "resource") == "configmaps" && labelOf(s, "component") == "apiserver" {
			verbs[labelOf(s, "verb")] = true
		}
	}
	for _, v := range []string{"POST", "GET", "LIST", "WATCH", "APPLY", "PATCH"} {
		if !verbs[v] {
			t.Errorf("apiserver_request_total has no configmaps %s; verbs: %v", v, verbs)
		}
	}
	if !hasSeries(mfs["apiserver_request_total"], map[string]string{"verb": "POST", "dry_run": "All", "resource": "configmaps"}) {
		t.Errorf("apiserver_request_total has no dry-run create")
	}
	if !hasSeries(mfs["apiserver_current_inflight_requests"], map[string]string{"request_kind": "readOnly"}) ||
		!hasSeries(mfs["apiserver_current_inflight_requests"], map[string]string{"request_kind": "mutating"}) {
		t.Errorf("apiserver_current_inflight_requests: %v", mfs["apiserver_current_inflight_requests"])
	}
	if !hasSeries(mfs["apiserver_storage_objects"], map[string]string{"resource": "configmaps"}) {
		t.Errorf("apiserver_storage_objects has no configmaps")
	}
	if deprecated != "" && !hasSeries(mfs["apiserver_requested_deprecated_apis"], map[string]string{"resource": deprecated}) {
		t.Errorf("apiserver_requested_deprecated_apis has no %s", deprecated)
	}
	// The aggregator's availability of each APIService (ALPHA; the
	// kubernetes-mixin's KubeAggregatedAPIDown reads it): 1 for the one
	// whose service is missing.
	if !slices.ContainsFunc(mfs["aggregator_unavailable_apiservice"].GetMetric(), func(s *dto.Metric) bool {
		return labelOf(s, "name") == unavailableAPIService && s.GetGauge().GetValue() == 1
	}) {
		t.Errorf("aggregator_unavailable_apiservice has no %s 1: %v", unavailableAPIService, mfs["aggregator_unavailable_apiservice"])
	}
	if hasSeries(mfs["apiserver_request_total"], map[string]string{"group": "nothing.example.com"}) {
		t.Errorf("apiserver_request_total counts a resource nothing serves")
	}
	// Only the API server's families: none of the controller manager's,
	// the scheduler's or client-go's.
	for name := range mfs {
		if !apiserver.APIServerOwns(name) {
			t.Errorf("/metrics serves %s, which is not the API server's", name)
		}
	}
}

// exerciseAPI runs the scenario; it returns the resource of the
// deprecated API version it read ("" if none is served).
func exerciseAPI(t *testing.T, cs kubernetes.Interface, cfg *rest.Config) (deprecatedResource string) {
	t.Helper()
	ctx := context.Background()
	createTestNamespace(t, cs, "metrics")
	cms := cs.CoreV1().ConfigMaps("metrics")

	// A validating webhook and a validating admission policy on config
	// maps.
	w := newWebhookServer(t)
	createValidating(t, cs, "metrics-hooks", validatingHook("deny.example.com", "metrics", w.clientConfig("/deny"), admissionregistrationv1.Fail))
	createPolicy(t, cs, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-vap-denied"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules:     []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: configMapRules[0]}},
				NamespaceSelector: inNamespace("metrics"),
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name != 'vap-denied'"}},
		},
	}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-vap-denied"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "no-vap-denied", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	})
	eventually(t, "the webhook and the policy", func() bool {
		_, errHook := dryRunConfigMap(cs, "metrics", "forbidden-probe")
		_, errPolicy := dryRunConfigMap(cs, "metrics", "vap-denied")
		return errHook != nil && errPolicy != nil
	})

	// A watch and a watch-list, open while config maps are written.
	watcher, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	watchList, err := cms.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer watchList.Stop()

	if _, err := createCM(cs, "metrics", "cm"); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "cm", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	apply := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"},"data":{"k":"v"}}`)
	if _, err := cms.Patch(ctx, "applied", types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "metrics-test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(ctx, "cm", types.MergePatchType, []byte(`{"data":{"k":"v"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitWatchEvent(t, watcher, func(ev watch.Event) bool { return ev.Type == watch.Added })
	awaitWatchEvent(t, watchList, func(ev watch.Event) bool {
		m, ok := ev.Object.(metav1.Object)
		return ev.Type == watch.Bookmark && ok && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
	})

	// A request with a service-account token.
	if _, err := cs.CoreV1().ServiceAccounts("metrics").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("metrics").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saCfg := rest.AnonymousClientConfig(cfg)
	saCfg.BearerToken = tr.Status.Token
	saCfg.TLSClientConfig = rest.TLSClientConfig{CAFile: cfg.CAFile}
	if _, err := kubernetes.NewForConfigOrDie(saCfg).Discovery().ServerVersion(); err != nil {
		t.Fatalf("a request with a service-account token: %v", err)
	}

	// A resource nothing serves (404): not counted.
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/nothing.example.com/v1/things").DoRaw(ctx); err == nil {
		t.Fatal("GET /apis/nothing.example.com/v1/things answered")
	}

	// A deprecated API version, if one is served.
	_, lists, err := cs.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lists {
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			obj, err := clientgoscheme.Scheme.New(mustParseGV(t, l.GroupVersion).WithKind(r.Kind))
			if err != nil || !deprecation.IsDeprecated(obj, 1, 37) {
				continue
			}
			path := "/apis/" + l.GroupVersion + "/" + r.Name
			if l.GroupVersion == "v1" {
				path = "/api/v1/" + r.Name
			}
			if _, err := cs.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			return r.Name
		}
	}
	return ""
}

func awaitWatchEvent(t *testing.T, w watch.Interface, match func(watch.Event) bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			if match(ev) {
				return
			}
		case <-timeout:
			t.Fatal("no matching watch event")
		}
	}
}

func labelOf(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// hasSeries reports whether a series of mf has these label values.
func hasSeries(mf *dto.MetricFamily, labels map[string]string) bool {
	for _, s := range mf.GetMetric() {
		match := true
		for k, v := range labels {
			match = match && labelOf(s, k) == v
		}
		if match {
			return true
		}
	}
	return false
}

// pollUntil checks cond every 20 ms for up to 30 s.
func pollUntil(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func mustParseGV(t *testing.T, gv string) schema.GroupVersion {
	t.Helper()
	v, err := schema.ParseGroupVersion(gv)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
