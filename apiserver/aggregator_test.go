package apiserver_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/internal/testcert"
)

const wardleGroup, wardleVersion = "wardle.example.com", "v1alpha1"

// wardleBackend is an aggregated API server over TLS with its own CA
// that requires a client certificate from the front-proxy CA and serves
// wardle.example.com/v1alpha1 (namespaced flunders): discovery, a list
// that echoes the X-Remote-* headers it was sent (at any version), a watch that sends one
// event, waits for release, then sends another, and an OpenAPI v3
// document.
type wardleBackend struct {
	hs       *httptest.Server
	port     int32
	caBundle []byte
	release  chan struct{}
	mu       sync.Mutex
	headers  []http.Header
}

func newWardleBackend(t *testing.T, ip string, frontProxyCA string) *wardleBackend {
	t.Helper()
	ca, cert := testcert.Serving(t, "api.wardle.svc", "127.0.0.1")
	clientCAs, err := certutil.NewPool(frontProxyCA)
	if err != nil {
		t.Fatal(err)
	}
	b := &wardleBackend{caBundle: ca, release: make(chan struct{})}
	prefix := "/apis/" + wardleGroup + "/{version}"
	mux := http.NewServeMux()
	mux.HandleFunc(prefix, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: wardleGroup + "/" + r.PathValue("version"),
			APIResources: []metav1.APIResource{{Name: "flunders", SingularName: "flunder", Namespaced: true, Kind: "Flunder", Verbs: metav1.Verbs{"get", "list", "watch"}}},
		})
	})
	mux.HandleFunc(prefix+"/namespaces/{ns}/flunders", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.headers = append(b.headers, r.Header.Clone())
		b.mu.Unlock()
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", "application/json")
			for i, name := range []string{"first", "second"} {
				if i == 1 {
					select {
					case <-b.release:
					case <-r.Context().Done():
						return
					}
				}
				fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Flunder","apiVersion":"%s/%s","metadata":{"name":%q}}}`+"\n", wardleGroup, wardleVersion, name)
				w.(http.Flusher).Flush()
			}
			return
		}
		writeJSON(w, map[string]any{
			"kind": "FlunderList", "apiVersion": wardleGroup + "/" + wardleVersion, "metadata": map[string]any{},
			"items": []any{}, "user": r.Header.Get("X-Remote-User"), "groups": r.Header.Values("X-Remote-Group"),
			"authorization": r.Header.Get("Authorization"), "impersonate": r.Header.Get("Impersonate-User"),
			"proxy": r.TLS.PeerCertificates[0].Subject.CommonName,
		})
	})
	mux.HandleFunc("/openapi/v3"+prefix, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "wardle", "version": "v0"}, "paths": map[string]any{}})
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
	b.hs, b.port = hs, int32(l.Addr().(*net.TCPAddr).Port)
	return b
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serveAggregating starts an API server with the front-proxy PKI pki.Ensure
// makes, and returns its client configuration and the PKI's files.
func serveAggregating(t *testing.T) (*rest.Config, pki.Files) {
	t.Helper()
	files, err := pki.Ensure(filepath.Join(t.TempDir(), "tls"), pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := newServerWith(t, apiserver.Config{
		ProxyClientCertFile: files.FrontProxyClientCert, ProxyClientKeyFile: files.FrontProxyClientKey,
		RequestHeaderCAFile: files.FrontProxyCACert, RequestHeaderAllowedNames: []string{pki.FrontProxyClientName},
		ClientCAFile: files.ClientCACert,
	})
	return cfg, files
}

// exposeBackend makes service ns/name (port 443, "https") whose one
// ready endpoint is ip:port.
func exposeBackend(t *testing.T, cs kubernetes.Interface, ns, name, ip string, port int32) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func wardleAPIService(version string, caBundle []byte) *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: version + "." + wardleGroup},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: wardleGroup, Version: version, GroupPriorityMinimum: 1000, VersionPriority: 15,
			Service:  &apiregistrationv1.ServiceReference{Namespace: "wardle", Name: "api", Port: ptr.To[int32](443)},
			CABundle: caBundle,
		},
	}
}

// waitAvailable waits for the APIService's Available condition to be
// status (and reason, unless empty) and returns the condition.
func waitAvailable(t *testing.T, ac aggregatorclient.Interface, name string, status apiregistrationv1.ConditionStatus, reason string) apiregistrationv1.APIServiceCondition {
	t.Helper()
	var got apiregistrationv1.APIServiceCondition
	eventually(t, fmt.Sprintf("APIService %s Available=%s %s", name, status, reason), func() bool {
		svc, err := ac.ApiregistrationV1().APIServices().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range svc.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				got = c
				return c.Status == status && (reason == "" || c.Reason == reason)
			}
		}
		return false
	})
	return got
}

func TestAggregation_ProxyDiscoveryAndAvailability(t *testing.T) {
	ctx := context.Background()
	ip := testcert.HostIPv4(t) // EndpointSlices may not name loopback addresses
	cfg, files := serveAggregating(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ac := aggregatorclient.NewForConfigOrDie(cfg)
	backend := newWardleBackend(t, ip, files.FrontProxyCACert)
	createTestNamespace(t, cs, "wardle")
	exposeBackend(t, cs, "wardle", "api", ip, backend.port)

	// A local APIService is Available at once; one whose service is
	// missing is not.
	local := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1.local.example.com"},
		Spec:       apiregistrationv1.APIServiceSpec{Group: "local.example.com", Version: "v1", GroupPriorityMinimum: 100, VersionPriority: 10},
	}
	missing := wardleAPIService("v1beta1", backend.caBundle)
	missing.Name, missing.Spec.Group, missing.Spec.Service.Name = "v1beta1.missing.example.com", "missing.example.com", "nowhere"
	for _, svc := range []*apiregistrationv1.APIService{local, missing, wardleAPIService(wardleVersion, backend.caBundle)} {
		if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitAvailable(t, ac, local.Name, apiregistrationv1.ConditionTrue, "Local")
	waitAvailable(t, ac, missing.Name, apiregistrationv1.ConditionFalse, "ServiceNotFound")
	waitAvailable(t, ac, wardleVersion+"."+wardleGroup, apiregistrationv1.ConditionTrue, "Passed")

	// The proxy sees the condition through its informer, a moment after
	// it is written (kube-aggregator's does too): until then it answers
	// 503.
	raw := cs.Discovery().RESTClient()
	eventually(t, "the proxy to see "+wardleVersion+"."+wardleGroup+" available", func() bool {
		_, err := raw.Get().AbsPath("/apis", wardleGroup, wardleVersion, "namespaces", "wardle", "flunders").DoRaw(ctx)
		return !apierrors.IsServiceUnavailable(err)
	})
	t.Run("proxied with the caller's identity", func(t *testing.T) {
		body, err := raw.Get().AbsPath("/apis", wardleGroup, wardleVersion, "namespaces", "wardle", "flunders").
			SetHeader("Authorization", "Bearer not-for-the-backend").DoRaw(ctx)
		if err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		var got struct {
			Kind, User, Authorization, Proxy string
			Groups                           []string
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		// Without authentication the test server's caller is
		// system:unsecured, a member of system:masters.
		if got.Kind != "FlunderList" || got.User != "system:unsecured" || !strings.Contains(strings.Join(got.Groups, ","), "system:masters") ||
			got.Authorization != "" || got.Proxy != pki.FrontProxyClientName {
			t.Fatalf("backend saw %+v (%s)", got, body)
		}
		// Impersonating: the backend sees the impersonated user only.
		body, err = raw.Get().AbsPath("/apis", wardleGroup, wardleVersion, "namespaces", "wardle", "flunders").
			SetHeader("Impersonate-User", "jane").SetHeader("Impersonate-Group", "system:masters").DoRaw(ctx)
		if err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		var imp struct {
			User, Impersonate string
			Groups            []string
		}
		if err := json.Unmarshal(body, &imp); err != nil || imp.User != "jane" || imp.Impersonate != "" || !slices.Contains(imp.Groups, "system:masters") {
			t.Fatalf("impersonated request: backend saw %s (%v)", body, err)
		}
		// Authorization happens here, before proxying.
		err = raw.Get().AbsPath("/apis", wardleGroup, wardleVersion, "namespaces", "wardle", "flunders").
			SetHeader("Impersonate-User", "bob").Do(ctx).Error()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("bob, who may not list flunders: %v, want 403", err)
		}
		backend.mu.Lock()
		for _, h := range backend.headers {
			if h.Get("X-Remote-User") == "bob" {
				t.Error("a forbidden request reached the backend")
			}
		}
		backend.mu.Unlock()
		// The group-version's discovery document is the backend's.
		body, err = raw.Get().AbsPath("/apis", wardleGroup, wardleVersion).DoRaw(ctx)
		if err != nil || !strings.Contains(string(body), `"flunders"`) {
			t.Fatalf("discovery of %s/%s: %v %s", wardleGroup, wardleVersion, err, body)
		}
	})

	t.Run("watch streams", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		stream, err := raw.Get().AbsPath("/apis", wardleGroup, wardleVersion, "namespaces", "wardle", "flunders").Param("watch", "true").Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		lines := bufio.NewScanner(stream)
		if !lines.Scan() || !strings.Contains(lines.Text(), `"first"`) {
			t.Fatalf("first event: %q %v", lines.Text(), lines.Err())
		}
		close(backend.release) // the second is sent only once the first arrived
		if !lines.Scan() || !strings.Contains(lines.Text(), `"second"`) {
			t.Fatalf("second event: %q %v", lines.Text(), lines.Err())
		}
	})

	t.Run("discovery and openapi list the group", func(t *testing.T) {
		groups, err := cs.Discovery().ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, g := range groups.Groups {
			found = found || (g.Name == wardleGroup && g.PreferredVersion.Version == wardleVersion)
		}
		if !found {
			t.Fatalf("aggregated discovery lacks %s: %+v", wardleGroup, groups.Groups)
		}
		_, lists, err := cs.Discovery().ServerGroupsAndResources()
		if err != nil {
			t.Logf("discovery: %v", err) // the missing APIService's group fails
		}
		found = false
		for _, l := range lists {
			for _, r := range l.APIResources {
				found = found || (l.GroupVersion == wardleGroup+"/"+wardleVersion && r.Name == "flunders" && r.Kind == "Flunder")
			}
		}
		if !found {
			t.Fatal("aggregated discovery lacks flunders")
		}
		legacy, err := raw.Get().AbsPath("/apis").SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil || !strings.Contains(string(legacy), `"groupVersion":"`+wardleGroup+`/`+wardleVersion+`"`) {
			t.Fatalf("legacy /apis: %v %s", err, legacy)
		}
		index, err := raw.Get().AbsPath("/openapi/v3").DoRaw(ctx)
		if err != nil || !strings.Contains(string(index), `"apis/`+wardleGroup+`/`+wardleVersion+`"`) {
			t.Fatalf("/openapi/v3: %v %s", err, index)
		}
		doc, err := raw.Get().AbsPath("/openapi/v3/apis", wardleGroup, wardleVersion).DoRaw(ctx)
		if err != nil || !strings.Contains(string(doc), `"title":"wardle"`) {
			t.Fatalf("/openapi/v3/apis/%s/%s: %v %s", wardleGroup, wardleVersion, err, doc)
		}
	})

	t.Run("a caBundle that is not PEM", func(t *testing.T) {
		bad := wardleAPIService("v1beta2", []byte("not a certificate"))
		bad.Spec.InsecureSkipTLSVerify = false
		if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, bad, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Since 1.37 the availability controller cannot build a transport
		// for it (its CA does not parse), so the APIService never becomes
		// Available and the proxy answers 503, as kube-apiserver's does.
		var err error
		eventually(t, "the proxy to know "+bad.Name, func() bool {
			err = raw.Get().AbsPath("/apis", wardleGroup, "v1beta2", "namespaces", "wardle", "flunders").Do(ctx).Error()
			return !apierrors.IsNotFound(err)
		})
		if !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("proxying with a bad caBundle: %v, want a 503 Status", err)
		}
		got, err := ac.ApiregistrationV1().APIServices().Get(ctx, bad.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue {
				t.Errorf("%s is Available with a caBundle that is not PEM", bad.Name)
			}
		}
	})

	t.Run("backend down", func(t *testing.T) {
		backend.hs.Close()
		// A change of the endpoints makes the controller check again.
		slice, err := cs.DiscoveryV1().EndpointSlices("wardle").Get(ctx, "api-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slice.Labels["touched"] = "true"
		if _, err := cs.DiscoveryV1().EndpointSlices("wardle").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cond := waitAvailable(t, ac, wardleVersion+"."+wardleGroup, apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck")
		if cond.Message == "" {
			t.Error("no message")
		}
		err = raw.Get().AbsPath("/apis", wardleGroup, wardleVersion, "namespaces", "wardle", "flunders").Do(ctx).Error()
		if !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("request to an unavailable APIService: %v, want 503", err)
		}
	})
}

// TestAggregation_AuthenticationConfigMap: the client CA, the
// requestheader CA and its allowed names and headers are published in
// kube-system/extension-apiserver-authentication.
func TestAggregation_AuthenticationConfigMap(t *testing.T) {
	cfg, files := serveAggregating(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	var cm *corev1.ConfigMap
	eventually(t, "extension-apiserver-authentication", func() bool {
		var err error
		cm, err = cs.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "extension-apiserver-authentication", metav1.GetOptions{})
		return err == nil && cm.Data["requestheader-client-ca-file"] != ""
	})
	frontProxyCA, err := certutil.CertsFromFile(files.FrontProxyCACert)
	if err != nil {
		t.Fatal(err)
	}
	published, err := certutil.ParseCertsPEM([]byte(cm.Data["requestheader-client-ca-file"]))
	if err != nil || len(published) != 1 || !published[0].Equal(frontProxyCA[0]) {
		t.Fatalf("requestheader-client-ca-file: %v %v", err, cm.Data["requestheader-client-ca-file"])
	}
	client, err := certutil.ParseCertsPEM([]byte(cm.Data["client-ca-file"]))
	if err != nil || len(client) != 1 || client[0].Subject.CommonName != "sqlkube-client-ca" {
		t.Fatalf("client-ca-file: %v %q", err, cm.Data["client-ca-file"])
	}
	want := map[string]string{
		"requestheader-allowed-names":        `["front-proxy-client"]`,
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
	}
	for k, v := range want {
		if cm.Data[k] != v {
			t.Errorf("%s = %q, want %q", k, cm.Data[k], v)
		}
	}
	// The proxy's certificate is the one the published CA verifies.
	proxy, err := certutil.CertsFromFile(files.FrontProxyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(published[0])
	if _, err := proxy[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
}
