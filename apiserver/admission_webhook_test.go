package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/internal/testcert"
)

// webhookServer is an admission webhook over TLS with its own CA: paths
// /label (adds the label webhook=touched), /deny (denies names starting
// with "forbidden"), /protect (denies deleting what is labelled
// protected=true), /slow (answers after 3s), /garbage (answers what is
// not an AdmissionReview). It records the requests it is sent.
type webhookServer struct {
	url      string // https://127.0.0.1:port
	port     int32
	caBundle []byte
	mu       sync.Mutex
	requests []*admissionv1.AdmissionRequest
}

func newWebhookServer(t *testing.T) *webhookServer {
	t.Helper()
	return newWebhookServerOn(t, "127.0.0.1")
}

// newWebhookServerOn is newWebhookServer listening on ip (its URL is
// still 127.0.0.1's).
func newWebhookServerOn(t *testing.T, ip string) *webhookServer {
	t.Helper()
	ca, cert := testcert.Serving(t, "webhook.hooks.svc", "127.0.0.1")
	w := &webhookServer{caBundle: ca}
	mux := http.NewServeMux()
	mux.HandleFunc("/label", w.review(func(req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) {
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		_ = json.Unmarshal(req.Object.Raw, &obj)
		patch := `[{"op":"add","path":"/metadata/labels","value":{"webhook":"touched"}}]`
		if obj.Metadata.Labels != nil {
			patch = `[{"op":"add","path":"/metadata/labels/webhook","value":"touched"}]`
		}
		resp.Patch, resp.PatchType = []byte(patch), ptr.To(admissionv1.PatchTypeJSONPatch)
	}))
	mux.HandleFunc("/deny", w.review(func(req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) {
		if strings.HasPrefix(req.Name, "forbidden") {
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "names starting with forbidden are not allowed"}
		}
	}))
	mux.HandleFunc("/protect", w.review(func(req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) {
		if req.Operation == admissionv1.Delete && strings.Contains(string(req.OldObject.Raw), `"protected":"true"`) {
			resp.Allowed = false
			resp.Result = &metav1.Status{Message: "protected objects may not be deleted"}
		}
	}))
	mux.HandleFunc("/slow", func(rw http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		w.review(func(*admissionv1.AdmissionRequest, *admissionv1.AdmissionResponse) {})(rw, r)
	})
	mux.HandleFunc("/garbage", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"this is": not an admission review`)
	})
	hs := httptest.NewUnstartedServer(mux)
	_ = hs.Listener.Close()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	hs.Listener = l
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	w.port = int32(l.Addr().(*net.TCPAddr).Port)
	w.url = fmt.Sprintf("https://127.0.0.1:%d", w.port)
	return w
}

// review serves AdmissionReview v1: decide fills in the response, which
// allows by default.
func (w *webhookServer) review(decide func(*admissionv1.AdmissionRequest, *admissionv1.AdmissionResponse)) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil ||
			review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" {
			http.Error(rw, fmt.Sprintf("not an AdmissionReview v1: %v", err), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.requests = append(w.requests, review.Request)
		w.mu.Unlock()
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		decide(review.Request, resp)
		review.Request, review.Response = nil, resp
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(&review)
	}
}

// last is the last request the webhook was sent for name.
func (w *webhookServer) last(name string) *admissionv1.AdmissionRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.requests) - 1; i >= 0; i-- {
		if w.requests[i].Name == name {
			return w.requests[i]
		}
	}
	return nil
}

// clientConfig is a URL client configuration for path.
func (w *webhookServer) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(w.url + path), CABundle: w.caBundle}
}

// configMapRules match creates and updates of config maps.
var configMapRules = []admissionregistrationv1.RuleWithOperations{{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
	Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
}}

// inNamespace selects the namespaces labelled test=name.
func inNamespace(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"test": name}}
}

// createTestNamespace creates namespace name, labelled test=name.
func createTestNamespace(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": name}}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// validatingHook is a webhook on config maps in namespace ns.
func validatingHook(name, ns string, cc admissionregistrationv1.WebhookClientConfig, fail admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name: name, ClientConfig: cc, Rules: configMapRules, FailurePolicy: &fail,
		NamespaceSelector: inNamespace(ns), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func createValidating(t *testing.T, cs kubernetes.Interface, name string, hooks ...admissionregistrationv1.ValidatingWebhook) {
	t.Helper()
	c := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// dryRunConfigMap creates config map name in ns as a dry run.
func dryRunConfigMap(cs kubernetes.Interface, ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

func createCM(cs kubernetes.Interface, ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
}

func TestAdmissionWebhook_MutatingAddsLabel(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	w := newWebhookServer(t)
	createTestNamespace(t, cs, "mutate")
	createEstablished(t, cfg, widgetCRD())
	hook := admissionregistrationv1.MutatingWebhook{
		Name: "label.example.com", ClientConfig: w.clientConfig("/label"),
		Rules: append(slicesClone(configMapRules), admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"*"}, Resources: []string{"widgets"}},
		}),
		NamespaceSelector: inNamespace("mutate"), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		AdmissionReviewVersions: []string{"v1"},
	}
	mc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "label"}, Webhooks: []admissionregistrationv1.MutatingWebhook{hook}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the mutating webhook", func() bool {
		cm, err := dryRunConfigMap(cs, "mutate", "probe")
		return err == nil && cm.Labels["webhook"] == "touched"
	})
	if req := w.last("probe"); req == nil || req.DryRun == nil || !*req.DryRun {
		t.Errorf("dry-run request: %+v, want dryRun true", req)
	}

	t.Run("built-in", func(t *testing.T) {
		cm, err := createCM(cs, "mutate", "real")
		if err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoreV1().ConfigMaps("mutate").Get(ctx, "real", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Labels["webhook"] != "touched" || got.Labels["webhook"] != "touched" {
			t.Errorf("labels: created %v, stored %v, want webhook=touched", cm.Labels, got.Labels)
		}
		req := w.last("real")
		if req == nil || (req.DryRun != nil && *req.DryRun) || req.Operation != admissionv1.Create ||
			req.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) || req.Namespace != "mutate" || req.UID == "" {
			t.Errorf("request: %+v", req)
		}
		if !strings.Contains(string(req.Object.Raw), `"kind":"ConfigMap"`) || !strings.Contains(string(req.Options.Raw), `"kind":"CreateOptions"`) {
			t.Errorf("request object %s, options %s: want the v1 ConfigMap and CreateOptions", req.Object.Raw, req.Options.Raw)
		}
	})

	t.Run("custom resource", func(t *testing.T) {
		dc := dynamic.NewForConfigOrDie(cfg)
		widgets := dc.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("mutate")
		created, err := widgets.Create(ctx, widget("w1", map[string]any{"replicas": int64(1)}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := created.GetLabels(); got["webhook"] != "touched" || got["app"] != "w1" {
			t.Errorf("widget labels %v, want app=w1 and webhook=touched", got)
		}
	})
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

func TestAdmissionWebhook_Validating(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	w := newWebhookServer(t)
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + l.Addr().String() + "/"), CABundle: w.caBundle}
	_ = l.Close()
	for _, ns := range []string{"guarded", "open", "fail", "ignore", "slow", "garbage"} {
		createTestNamespace(t, cs, ns)
	}
	slow := validatingHook("slow.example.com", "slow", w.clientConfig("/slow"), admissionregistrationv1.Fail)
	slow.TimeoutSeconds = ptr.To[int32](1)
	createValidating(t, cs, "hooks",
		validatingHook("deny.example.com", "guarded", w.clientConfig("/deny"), admissionregistrationv1.Fail),
		validatingHook("down-fail.example.com", "fail", down, admissionregistrationv1.Fail),
		// In namespace ignore, a webhook that is down is ignored, the
		// next one still denies.
		validatingHook("down-ignore.example.com", "ignore", down, admissionregistrationv1.Ignore),
		validatingHook("deny-after-ignore.example.com", "ignore", w.clientConfig("/deny"), admissionregistrationv1.Fail),
		slow,
		validatingHook("garbage.example.com", "garbage", w.clientConfig("/garbage"), admissionregistrationv1.Fail),
	)
	eventually(t, "the validating webhooks", func() bool {
		_, err := dryRunConfigMap(cs, "guarded", "forbidden-probe")
		return err != nil
	})

	t.Run("deny", func(t *testing.T) {
		_, err := createCM(cs, "guarded", "forbidden-1")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "deny.example.com" denied the request: names starting with forbidden are not allowed`) {
			t.Fatalf("create forbidden-1: %v, want 403 with the webhook's message", err)
		}
		if _, err := createCM(cs, "guarded", "allowed"); err != nil {
			t.Fatalf("create allowed: %v", err)
		}
	})
	t.Run("namespaceSelector", func(t *testing.T) {
		if _, err := createCM(cs, "open", "forbidden-1"); err != nil {
			t.Fatalf("create in a namespace the webhook does not select: %v", err)
		}
	})
	t.Run("failurePolicy Fail", func(t *testing.T) {
		_, err := createCM(cs, "fail", "c")
		if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "down-fail.example.com"`) {
			t.Fatalf("create with the webhook down: %v, want 500 failed calling webhook", err)
		}
	})
	t.Run("failurePolicy Ignore", func(t *testing.T) {
		if _, err := createCM(cs, "ignore", "c"); err != nil {
			t.Fatalf("create with an ignored webhook down: %v", err)
		}
		if _, err := createCM(cs, "ignore", "forbidden-1"); !apierrors.IsForbidden(err) {
			t.Fatalf("create forbidden-1: %v, want the next webhook's 403", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		_, err := createCM(cs, "slow", "c")
		if took := time.Since(start); took > 2500*time.Millisecond {
			t.Errorf("took %v, want about the webhook's 1s timeout", took)
		}
		if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "slow.example.com"`) ||
			!strings.Contains(err.Error(), "deadline exceeded") {
			t.Fatalf("create with a slow webhook: %v, want 500 deadline exceeded", err)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		_, err := createCM(cs, "garbage", "c")
		if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "garbage.example.com"`) {
			t.Fatalf("create with a webhook answering garbage: %v, want 500 failed calling webhook", err)
		}
	})
	t.Run("dry run", func(t *testing.T) {
		if _, err := dryRunConfigMap(cs, "guarded", "dry"); err != nil {
			t.Fatal(err)
		}
		if req := w.last("dry"); req == nil || req.DryRun == nil || !*req.DryRun {
			t.Errorf("dry-run request %+v, want dryRun true", req)
		}
	})
	t.Run("update", func(t *testing.T) {
		cm, err := cs.CoreV1().ConfigMaps("guarded").Get(context.Background(), "allowed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"k": "v"}
		if _, err := cs.CoreV1().ConfigMaps("guarded").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		req := w.last("allowed")
		if req.Operation != admissionv1.Update || !strings.Contains(string(req.OldObject.Raw), `"name":"allowed"`) || strings.Contains(string(req.OldObject.Raw), `"k":"v"`) {
			t.Errorf("update request: operation %s, old object %s", req.Operation, req.OldObject.Raw)
		}
	})
}

func TestAdmissionWebhook_ServiceReference(t *testing.T) {
	ctx := context.Background()
	// EndpointSlices may not name loopback addresses: the webhook
	// listens on one of the host's.
	ip := testcert.HostIPv4(t)
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	w := newWebhookServerOn(t, ip)
	createTestNamespace(t, cs, "hooks")
	// A service without a selector, its endpoint the test's server.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook", Namespace: "hooks"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if _, err := cs.CoreV1().Services("hooks").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "webhook-1", Namespace: "hooks", Labels: map[string]string{discoveryv1.LabelServiceName: "webhook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(w.port)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("hooks").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cc := admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: "hooks", Name: "webhook", Path: ptr.To("/deny"), Port: ptr.To[int32](443)},
		CABundle: w.caBundle,
	}
	createValidating(t, cs, "service", validatingHook("service.example.com", "hooks", cc, admissionregistrationv1.Fail))
	eventually(t, "the webhook behind a service to deny", func() bool {
		_, err := dryRunConfigMap(cs, "hooks", "forbidden-1")
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "names starting with forbidden are not allowed")
	})
	if _, err := createCM(cs, "hooks", "allowed"); err != nil {
		t.Fatal(err)
	}
}

func TestAdmissionWebhook_MalformedConfigurations(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	w := newWebhookServer(t)
	good := validatingHook("good.example.com", "x", w.clientConfig("/deny"), admissionregistrationv1.Fail)
	for name, mutate := range map[string]func(h *admissionregistrationv1.ValidatingWebhook){
		"no sideEffects": func(h *admissionregistrationv1.ValidatingWebhook) { h.SideEffects = nil },
		"sideEffects Some": func(h *admissionregistrationv1.ValidatingWebhook) {
			h.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
		},
		"http URL": func(h *admissionregistrationv1.ValidatingWebhook) { h.ClientConfig.URL = ptr.To("http://127.0.0.1/") },
		"URL and service": func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig.Service = &admissionregistrationv1.ServiceReference{Namespace: "a", Name: "b"}
		},
		"no review versions": func(h *admissionregistrationv1.ValidatingWebhook) { h.AdmissionReviewVersions = nil },
		"timeout 31s":        func(h *admissionregistrationv1.ValidatingWebhook) { h.TimeoutSeconds = ptr.To[int32](31) },
		"bad selector": func(h *admissionregistrationv1.ValidatingWebhook) {
			h.NamespaceSelector.MatchLabels = map[string]string{"a b": "c"}
		},
		"bad match condition": func(h *admissionregistrationv1.ValidatingWebhook) {
			h.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "object.("}}
		},
		"one-part name": func(h *admissionregistrationv1.ValidatingWebhook) { h.Name = "deny" },
	} {
		t.Run(name, func(t *testing.T) {
			h := good
			h.NamespaceSelector = inNamespace("x")
			h.ClientConfig.URL = ptr.To(*good.ClientConfig.URL)
			mutate(&h)
			c := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{h}}
			_, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), c, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: %v, want 422 Invalid", err)
			}
		})
	}
}

func TestAdmissionWebhook_DeleteAndSubresources(t *testing.T) {
	ctx := context.Background()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := newServerWith(t, apiserver.Config{ServiceAccountKey: key})
	cs := kubernetes.NewForConfigOrDie(cfg)
	w := newWebhookServer(t)
	createTestNamespace(t, cs, "subs")
	protect := validatingHook("protect.example.com", "subs", w.clientConfig("/protect"), admissionregistrationv1.Fail)
	protect.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	subs := validatingHook("subresources.example.com", "subs", w.clientConfig("/deny"), admissionregistrationv1.Fail)
	subs.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding", "pods/eviction", "serviceaccounts/token"}},
	}, {
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces/finalize"}},
	}}
	// Namespaces are cluster-scoped: the selector matches the namespace
	// itself.
	createValidating(t, cs, "subresources", protect, subs)
	for _, name := range []string{"kept", "gone", "probe"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"protected": "true"}}}
		if name == "gone" {
			cm.Labels = nil
		}
		if _, err := cs.CoreV1().ConfigMaps("subs").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the webhooks", func() bool {
		err := cs.CoreV1().ConfigMaps("subs").Delete(ctx, "probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	})

	t.Run("delete sees oldObject", func(t *testing.T) {
		// A denial without a code is a 400, as upstream.
		err := cs.CoreV1().ConfigMaps("subs").Delete(ctx, "kept", metav1.DeleteOptions{})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "protected objects may not be deleted") {
			t.Fatalf("delete kept: %v, want 400 from the webhook", err)
		}
		if err := cs.CoreV1().ConfigMaps("subs").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete gone: %v", err)
		}
		req := w.last("gone")
		if req == nil || req.Operation != admissionv1.Delete || !strings.Contains(string(req.OldObject.Raw), `"name":"gone"`) ||
			req.Object.Raw != nil || !strings.Contains(string(req.Options.Raw), `"kind":"DeleteOptions"`) {
			t.Errorf("delete request: %+v", req)
		}
		err = cs.CoreV1().ConfigMaps("subs").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if !apierrors.IsBadRequest(err) {
			t.Fatalf("deletecollection: %v, want 400 from the webhook", err)
		}
		if _, err := cs.CoreV1().ConfigMaps("subs").Get(ctx, "kept", metav1.GetOptions{}); err != nil {
			t.Fatalf("kept after the denied deletions: %v", err)
		}
	})

	t.Run("pods/binding and pods/eviction", func(t *testing.T) {
		for _, name := range []string{"bound", "forbidden-bound"} {
			if _, err := cs.CoreV1().Pods("subs").Create(ctx, simplePod(name), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		bind := func(name string) error {
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
			return cs.CoreV1().Pods("subs").Bind(ctx, b, metav1.CreateOptions{})
		}
		if err := bind("forbidden-bound"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "names starting with forbidden") {
			t.Fatalf("bind forbidden-bound: %v, want 403 from the webhook", err)
		}
		if err := bind("bound"); err != nil {
			t.Fatal(err)
		}
		req := w.last("bound")
		if req == nil || req.SubResource != "binding" || req.Kind.Kind != "Binding" || req.Resource.Resource != "pods" {
			t.Errorf("binding request: %+v", req)
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "forbidden-bound", Namespace: "subs"}}
		if err := cs.PolicyV1().Evictions("subs").Evict(ctx, ev); !apierrors.IsForbidden(err) {
			t.Fatalf("evict forbidden-bound: %v, want 403 from the webhook", err)
		}
		ev.Name = "bound"
		if err := cs.PolicyV1().Evictions("subs").Evict(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if req := w.last("bound"); req == nil || req.SubResource != "eviction" || req.Kind != (metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}) {
			t.Errorf("eviction request: %+v", req)
		}
	})

	t.Run("serviceaccounts/token", func(t *testing.T) {
		for _, name := range []string{"robot", "forbidden-robot"} {
			if _, err := cs.CoreV1().ServiceAccounts("subs").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		tr := &authenticationv1.TokenRequest{}
		if _, err := cs.CoreV1().ServiceAccounts("subs").CreateToken(ctx, "forbidden-robot", tr, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("token for forbidden-robot: %v, want 403 from the webhook", err)
		}
		if _, err := cs.CoreV1().ServiceAccounts("subs").CreateToken(ctx, "robot", tr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if req := w.last("robot"); req == nil || req.SubResource != "token" || req.Kind.Kind != "TokenRequest" || req.Kind.Group != "authentication.k8s.io" {
			t.Errorf("token request: %+v", req)
		}
	})

	t.Run("namespaces/finalize", func(t *testing.T) {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, "subs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if req := w.last("subs"); req == nil || req.SubResource != "finalize" || req.Operation != admissionv1.Update || req.OldObject.Raw == nil {
			t.Errorf("finalize request: %+v", req)
		}
	})
}

func TestAdmissionWebhook_MatchPolicyEquivalent(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	w := newWebhookServer(t)
	createTestNamespace(t, cs, "hpas")
	// The webhook names autoscaling/v2 only; matchPolicy is Equivalent by
	// default.
	hook := validatingHook("hpa.example.com", "hpas", w.clientConfig("/deny"), admissionregistrationv1.Fail)
	hook.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"autoscaling"}, APIVersions: []string{"v2"}, Resources: []string{"horizontalpodautoscalers"}},
	}}
	createValidating(t, cs, "hpa", hook)
	hpa := func(name string) *autoscalingv1.HorizontalPodAutoscaler {
		return &autoscalingv1.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d"}, MaxReplicas: 4},
		}
	}
	eventually(t, "the webhook to deny autoscaling/v1 writes", func() bool {
		_, err := cs.AutoscalingV1().HorizontalPodAutoscalers("hpas").Create(ctx, hpa("forbidden-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err)
	})
	if _, err := cs.AutoscalingV1().HorizontalPodAutoscalers("hpas").Create(ctx, hpa("ok"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	req := w.last("ok")
	if req == nil || req.Kind.Version != "v2" || req.RequestKind == nil || req.RequestKind.Version != "v1" ||
		!strings.Contains(string(req.Object.Raw), `"apiVersion":"autoscaling/v2"`) {
		t.Errorf("request: kind %v, requestKind %v, object %s; want the v1 write converted to v2", req.Kind, req.RequestKind, req.Object.Raw)
	}
}
