package apiserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/pki"
)

// lineWriter hands each written line (one audit event) to a channel.
type lineWriter struct {
	lines chan []byte
	all   bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.all.Write(p) // the Auditor serializes writes
	w.lines <- bytes.Clone(p)
	return len(p), nil
}

// auditedServer serves the API over TLS with client-certificate
// authentication and an audit log (policy: file contents, or "" for the
// default); it returns the admin's client config and the log.
func auditedServer(t *testing.T, policy string) (*rest.Config, *lineWriter) {
	t.Helper()
	dir := t.TempDir()
	files, err := pki.Ensure(filepath.Join(dir, "tls"), pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := filters.AuditOptions{}
	if policy != "" {
		opts.PolicyFile = filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(opts.PolicyFile, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	log := &lineWriter{lines: make(chan []byte, 1000)}
	opts.Out = log
	auditor, err := filters.NewAuditor(opts)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Client: newStorage(t), Logger: zerolog.Nop(), Authenticate: true, Audit: auditor,
		DisableAdmissionPlugins: []string{"ServiceAccount"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(context.Background()); err != nil { // the default namespace
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
	return &rest.Config{Host: hs.URL, UserAgent: "audit-test", TLSClientConfig: rest.TLSClientConfig{
		CAFile: files.CACert, CertFile: files.AdminCert, KeyFile: files.AdminKey,
	}}, log
}

// awaitEvent reads the log until an event matches (events are written
// just after the response, so a client may see the response first).
func awaitEvent(t *testing.T, log *lineWriter, match func(*auditv1.Event) bool) *auditv1.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line := <-log.lines:
			ev := &auditv1.Event{}
			if err := json.Unmarshal(line, ev); err != nil {
				t.Fatalf("audit line is not an Event: %v\n%s", err, line)
			}
			if ev.Kind != "Event" || ev.APIVersion != "audit.k8s.io/v1" {
				t.Fatalf("audit line is %s %s", ev.APIVersion, ev.Kind)
			}
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no matching audit event; log:\n%s", log.all.String())
		}
	}
}

func isCall(verb, resource, name string) func(*auditv1.Event) bool {
	return func(ev *auditv1.Event) bool {
		return ev.Stage == auditv1.StageResponseComplete && ev.Verb == verb && ev.ObjectRef != nil &&
			ev.ObjectRef.Resource == resource && ev.ObjectRef.Name == name
	}
}

func TestAudit_MetadataByDefault(t *testing.T) {
	ctx := context.Background()
	cfg, log := auditedServer(t, "")
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "body-value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The created object's name is logged, though not in the URL.
	ev := awaitEvent(t, log, isCall("create", "configmaps", "cm"))
	if ev.Level != auditv1.LevelMetadata || ev.User.Username != "kubernetes-admin" || !slices.Contains(ev.User.Groups, "system:masters") ||
		ev.ObjectRef.Namespace != "default" || ev.ObjectRef.APIVersion != "v1" || ev.ResponseStatus == nil || ev.ResponseStatus.Code != http.StatusCreated ||
		!slices.Equal(ev.SourceIPs, []string{"127.0.0.1"}) || !strings.HasPrefix(ev.UserAgent, "audit-test") || ev.AuditID == "" ||
		ev.RequestReceivedTimestamp.IsZero() || ev.StageTimestamp.Before(&ev.RequestReceivedTimestamp) || ev.RequestObject != nil || ev.ResponseObject != nil {
		t.Fatalf("create event: %+v", ev)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "missing", metav1.GetOptions{}); err == nil {
		t.Fatal("got a missing configmap")
	}
	if ev := awaitEvent(t, log, isCall("get", "configmaps", "missing")); ev.ResponseStatus.Code != http.StatusNotFound ||
		ev.ResponseStatus.Status != metav1.StatusFailure || ev.ResponseStatus.Reason != metav1.StatusReasonNotFound || !strings.Contains(ev.ResponseStatus.Message, `"missing" not found`) {
		t.Fatalf("get of a missing object audited with %+v", ev.ResponseStatus)
	}
	// A bearer token sent along is never logged (headers are not).
	req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/api/v1/namespaces", nil)
	req.Header.Set("Authorization", "Bearer sekrit-token-value")
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ev := awaitEvent(t, log, isCall("list", "namespaces", "")); ev.Level != auditv1.LevelMetadata {
		t.Fatalf("list event %+v", ev)
	}
	// A watch is logged when it starts, not only when it ends.
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := awaitEvent(t, log, func(ev *auditv1.Event) bool { return ev.Stage == auditv1.StageResponseStarted && ev.Verb == "watch" }); ev.ResponseStatus.Code != http.StatusOK {
		t.Fatalf("watch started: %+v", ev)
	}
	if strings.Contains(log.all.String(), "sekrit-token-value") || strings.Contains(log.all.String(), "body-value") {
		t.Fatalf("the log holds a token or a body:\n%s", log.all.String())
	}
}

func TestAudit_RequestResponsePolicyNeverLogsSecrets(t *testing.T) {
	ctx := context.Background()
	cfg, log := auditedServer(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: None\n  resources:\n  - group: \"\"\n    resources: [events]\n- level: RequestResponse\n")
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "plain-secret-value"}, Data: map[string][]byte{"other": []byte("binary-secret-value")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := awaitEvent(t, log, isCall("create", "secrets", "db")); ev.Level != auditv1.LevelMetadata || ev.RequestObject != nil || ev.ResponseObject != nil {
		t.Fatalf("secret create logged at %s with bodies", ev.Level)
	}
	if ev := awaitEvent(t, log, isCall("get", "secrets", "db")); ev.Level != auditv1.LevelMetadata || ev.ResponseObject != nil {
		t.Fatalf("secret get logged at %s with bodies", ev.Level)
	}
	// Other resources get their bodies at RequestResponse.
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "config-body"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The created object's name is logged, though not in the URL.
	ev := awaitEvent(t, log, isCall("create", "configmaps", "cm"))
	if ev.Level != auditv1.LevelRequestResponse || ev.RequestObject == nil || ev.ResponseObject == nil ||
		!bytes.Contains(ev.RequestObject.Raw, []byte("config-body")) || !bytes.Contains(ev.ResponseObject.Raw, []byte(`"resourceVersion"`)) {
		t.Fatalf("configmap create at RequestResponse: %+v", ev)
	}
	for _, s := range []string{"plain-secret-value", "binary-secret-value", "YmluYXJ5LXNlY3JldC12YWx1ZQ"} {
		if strings.Contains(log.all.String(), s) {
			t.Fatalf("the log holds secret data %q:\n%s", s, log.all.String())
		}
	}
}

func TestNewAuditor_BadPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := filters.NewAuditor(filters.AuditOptions{Out: &bytes.Buffer{}, PolicyFile: path}); err == nil {
		t.Fatal("a policy with an unknown level was accepted")
	}
}
