package apiserver_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// do sends one request and returns its status, body and Warning headers.
func do(t *testing.T, method, url, contentType, body string) (int, string, []string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Values("Warning")
}

// TestFieldValidation: unknown and duplicate fields in create, update,
// patch and apply bodies are ignored, warned of or rejected as the
// fieldValidation parameter says (Warn when absent).
func TestFieldValidation(t *testing.T) {
	cfg := newServer(t)
	base := cfg.Host + "/api/v1/namespaces/default/configmaps"
	const (
		jsonCT  = "application/json"
		yamlCT  = "application/yaml"
		mergeCT = "application/merge-patch+json"
		smpCT   = "application/strategic-merge-patch+json"
		jpCT    = "application/json-patch+json"
		applyCT = "application/apply-patch+yaml"
	)
	// A body with one unknown and one duplicate field.
	bad := func(name string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","bogus":1},"data":{"k":"v","k":"w"}}`
	}
	unknownWarning := `299 - "unknown field \"metadata.bogus\""`
	duplicateWarning := `299 - "duplicate field \"data.k\""`
	if code, body, _ := do(t, "POST", base, jsonCT, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"target"}}`); code != http.StatusCreated {
		t.Fatalf("creating the patch target: %d %s", code, body)
	}

	cases := []struct {
		name, method, path, query, contentType, body string
		wantCode                                     int
		wantWarnings                                 []string
		wantInBody                                   string
	}{
		{"create default warns", "POST", "", "", jsonCT, bad("warned"), http.StatusCreated, []string{unknownWarning, duplicateWarning}, ""},
		{"create Warn", "POST", "", "?fieldValidation=Warn", jsonCT, bad("warned2"), http.StatusCreated, []string{unknownWarning, duplicateWarning}, ""},
		{"create Ignore", "POST", "", "?fieldValidation=Ignore", jsonCT, bad("ignored"), http.StatusCreated, nil, `"k":"w"`},
		{"create Strict", "POST", "", "?fieldValidation=Strict", jsonCT, bad("rejected"), http.StatusBadRequest, nil,
			`ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"metadata.bogus\", duplicate field \"data.k\"`},
		{"create Strict YAML duplicate", "POST", "", "?fieldValidation=Strict", yamlCT, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: yaml-dup\ndata:\n  a: b\n  a: c\n", http.StatusBadRequest, nil,
			`strict decoding error: yaml: unmarshal errors:\n  line 7: key \"a\" already set in map`},
		{"create Warn YAML unknown", "POST", "", "", yamlCT, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: yaml-unknown\nspec:\n  foo: 1\n", http.StatusCreated, []string{`299 - "unknown field \"spec\""`}, ""},
		{"create bad directive", "POST", "", "?fieldValidation=Loud", jsonCT, bad("loud"), http.StatusUnprocessableEntity, nil, "fieldValidation"},
		{"update Strict", "PUT", "/target", "?fieldValidation=Strict", jsonCT, bad("target"), http.StatusBadRequest, nil, `strict decoding error: unknown field \"metadata.bogus\"`},
		{"update Warn", "PUT", "/target", "", jsonCT, bad("target"), http.StatusOK, []string{unknownWarning, duplicateWarning}, ""},
		{"merge patch Strict", "PATCH", "/target", "?fieldValidation=Strict", mergeCT, `{"metadata":{"bogus":1}}`, http.StatusUnprocessableEntity, nil, `strict decoding error: unknown field \"metadata.bogus\"`},
		{"merge patch Warn", "PATCH", "/target", "", mergeCT, `{"metadata":{"bogus":1},"data":{"x":"1","x":"2"}}`, http.StatusOK, []string{`299 - "duplicate field \"data.x\""`, unknownWarning}, ""},
		{"merge patch Ignore", "PATCH", "/target", "?fieldValidation=Ignore", mergeCT, `{"metadata":{"bogus":1}}`, http.StatusOK, nil, ""},
		{"strategic patch Strict", "PATCH", "/target", "?fieldValidation=Strict", smpCT, `{"spec":{"x":1}}`, http.StatusUnprocessableEntity, nil, `strict decoding error: unknown field \"spec\"`},
		{"JSON patch Strict", "PATCH", "/target", "?fieldValidation=Strict", jpCT, `[{"op":"add","path":"/spec","value":{"x":1}}]`, http.StatusUnprocessableEntity, nil, `strict decoding error: unknown field \"spec\"`},
		{"JSON patch duplicate Warn", "PATCH", "/target", "", jpCT, `[{"op":"add","path":"/data/z","value":"1","value":"2"}]`, http.StatusOK, []string{`299 - "json patch duplicate field \"[0].value\""`}, ""},
		{"apply Strict", "PATCH", "/applied", "?fieldManager=t&fieldValidation=Strict", applyCT, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\nspec:\n  foo: 1\n", http.StatusBadRequest, nil, `strict decoding error: unknown field \"spec\"`},
		{"apply Strict duplicate", "PATCH", "/applied", "?fieldManager=t&fieldValidation=Strict", applyCT, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: b\n  a: c\n", http.StatusBadRequest, nil, `already set in map`},
		{"apply Warn drops the field", "PATCH", "/applied", "?fieldManager=t", applyCT, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  bogus: 1\ndata:\n  a: b\n", http.StatusCreated, []string{unknownWarning}, `"a":"b"`},
		{"apply Ignore drops the field", "PATCH", "/applied", "?fieldManager=t&fieldValidation=Ignore", applyCT, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: c\nspec:\n  foo: [1]\n", http.StatusOK, nil, `"a":"c"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body, warnings := do(t, tc.method, base+tc.path+tc.query, tc.contentType, tc.body)
			if code != tc.wantCode {
				t.Fatalf("got %d (%s), want %d", code, body, tc.wantCode)
			}
			if strings.Join(warnings, "\n") != strings.Join(tc.wantWarnings, "\n") {
				t.Errorf("warnings:\n got %q\nwant %q", warnings, tc.wantWarnings)
			}
			if !strings.Contains(body, tc.wantInBody) {
				t.Errorf("body lacks %s: %s", tc.wantInBody, body)
			}
			if strings.Contains(body, "bogus") && code < 300 {
				t.Errorf("the unknown field was kept: %s", body)
			}
		})
	}
	if code, body, _ := do(t, "GET", base+"/rejected", "", ""); code != http.StatusNotFound {
		t.Errorf("a rejected create stored the object: %d %s", code, body)
	}
}

// warningRecorder collects the warnings client-go receives.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *warningRecorder) HandleWarningHeader(code int, agent, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, text)
}

// TestFieldValidation_ClientGo: client-go's warning handler sees the
// server's warnings, and its typed (protobuf) writes, which cannot carry
// unknown fields, get none.
func TestFieldValidation_ClientGo(t *testing.T) {
	ctx := context.Background()
	cfg := rest.CopyConfig(newServer(t))
	rec := &warningRecorder{}
	cfg.WarningHandler = rec
	dyn := dynamic.NewForConfigOrDie(cfg)
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "d"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "d"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox", "colour": "red"}}},
			},
			"foo": true,
		},
	}}
	if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{`unknown field "spec.foo"`, `unknown field "spec.template.spec.containers[0].colour"`}
	if strings.Join(rec.msgs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings: got %q, want %q", rec.msgs, want)
	}
	_, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
	if err == nil || !strings.Contains(err.Error(), `strict decoding error: unknown field "spec.foo", unknown field "spec.template.spec.containers[0].colour"`) {
		t.Fatalf("strict create: got %v", err)
	}

	rec.msgs = nil
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs := kubernetes.NewForConfigOrDie(pcfg)
	d, err := cs.AppsV1().Deployments("default").Get(ctx, "d", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Labels = map[string]string{"x": "y"}
	if _, err := cs.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("protobuf update with Strict: %v", err)
	}
	if len(rec.msgs) != 0 {
		t.Fatalf("protobuf update warned: %q", rec.msgs)
	}
}
