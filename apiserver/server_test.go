package apiserver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	etcdkube "go.etcd.io/etcd/client/v3/kubernetes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/internal/teststore"
)

// newServer starts the API server on a fresh SQLite database, storage
// in-process, and returns a client config for it.
func newServer(t testing.TB) *rest.Config {
	t.Helper()
	cfg, _ := newServerWith(t, apiserver.Config{})
	return cfg
}

// newServerWith is newServer with a configuration (Client and Logger are
// set here) that also returns the server.
func newServerWith(t testing.TB, conf apiserver.Config) (*rest.Config, *apiserver.Server) {
	t.Helper()
	conf.Client = newStorage(t)
	return serveAPIWith(t, conf)
}

// newServerWithStorage is newServer that also returns the etcd client
// under the API server (to compact, say).
func newServerWithStorage(t testing.TB) (*rest.Config, *etcdkube.Client) {
	t.Helper()
	client := newStorage(t)
	return serveAPI(t, client), client
}

// newStorage starts the etcd API in-process on a fresh SQLite database.
func newStorage(t testing.TB) *etcdkube.Client {
	t.Helper()
	return teststore.Local(t, t.TempDir())
}

// serveAPI starts an API server over client (another one may share it,
// as API servers share a database).
func serveAPI(t testing.TB, client *etcdkube.Client) *rest.Config {
	t.Helper()
	cfg, _ := serveAPIWith(t, apiserver.Config{Client: client})
	return cfg
}

// serveAPIWith starts an API server with conf (Logger is set here) and
// bootstraps it (system namespaces, RBAC policy). Unless conf says which
// admission plugins to disable (an empty, non-nil list: none), the
// ServiceAccount plugin is off, as in Kubernetes' integration tests: no
// service account controller runs here to create the accounts pods need
// (admission_test.go runs one).
func serveAPIWith(t testing.TB, conf apiserver.Config) (*rest.Config, *apiserver.Server) {
	t.Helper()
	conf.Logger = zerolog.Nop()
	if conf.DisableAdmissionPlugins == nil {
		conf.DisableAdmissionPlugins = []string{"ServiceAccount"}
	}
	api, err := apiserver.New(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(context.Background()); err != nil {
		api.Close()
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		api.Close()
	})
	return &rest.Config{Host: hs.URL}, api
}

func TestServer_ClientGoCRUD(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Phase != corev1.NamespaceActive || ns.UID == "" || ns.ResourceVersion == "" || ns.CreationTimestamp.IsZero() {
		t.Fatalf("created namespace lacks server fields: %+v", ns)
	}
	cms := cs.CoreV1().ConfigMaps("team-a")
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "cfg-", Labels: map[string]string{"app": "web"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cm.Name, "cfg-") || len(cm.Name) != len("cfg-")+5 {
		t.Fatalf("generateName gave %q", cm.Name)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: got %v, want AlreadyExists", err)
	}

	got, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("get: %v %+v", err, got)
	}
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != cm.Name {
		t.Fatalf("list app=web: %v %+v", err, list)
	}
	if list, err = cms.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=other"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("list by name: %v %+v", err, list)
	}
	if _, err := cms.List(ctx, metav1.ListOptions{FieldSelector: "spec.bogus=1"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("unsupported field selector: got %v, want 400", err)
	}

	// Update, then a stale update conflicts.
	got.Data["k"] = "v2"
	updated, err := cms.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil || updated.Data["k"] != "v2" || updated.ResourceVersion == got.ResourceVersion {
		t.Fatalf("update: %v %+v", err, updated)
	}
	got.Data["k"] = "stale"
	if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: got %v, want Conflict", err)
	}

	if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: got %v, want NotFound", err)
	}

	// The dynamic client sees the same objects.
	dyn := dynamic.NewForConfigOrDie(cfg)
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	u, err := dyn.Resource(gvr).Namespace("team-a").Get(ctx, "other", metav1.GetOptions{})
	if err != nil || u.GetName() != "other" || u.GetKind() != "ConfigMap" {
		t.Fatalf("dynamic get: %v %+v", err, u)
	}
	created, err := dyn.Resource(gvr).Namespace("team-a").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "dyn"}, "data": map[string]any{"a": "b"},
	}}, metav1.CreateOptions{})
	if err != nil || created.GetUID() == "" {
		t.Fatalf("dynamic create: %v %+v", err, created)
	}
}

func TestServer_Watch(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	cms := cs.CoreV1().ConfigMaps("default")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"x": "y"}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted} {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed before %s", want)
			}
			if ev.Type != want || ev.Object.(*corev1.ConfigMap).Name != "w" {
				t.Fatalf("got %s %v, want %s of w", ev.Type, ev.Object, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event within 10s", want)
		}
	}
}

// TestServer_BadRequests: malformed and hostile requests get a 4xx Status
// and change nothing.
func TestServer_BadRequests(t *testing.T) {
	cfg := newServer(t)
	configMaps := func() []string {
		t.Helper()
		list, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, cm := range list.Items {
			names = append(names, cm.Namespace+"/"+cm.Name+"@"+cm.ResourceVersion)
		}
		return names
	}
	before := configMaps() // the bootstrap's (kube-system's legacy-token tracking)
	cases := []struct {
		name, method, path, body string
		want                     int
	}{
		{"bad json", "POST", "/api/v1/namespaces/default/configmaps", `{"metadata":`, http.StatusBadRequest},
		{"wrong kind", "POST", "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`, http.StatusBadRequest},
		{"invalid name", "POST", "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Not_Valid"}}`, http.StatusUnprocessableEntity},
		{"invalid label", "POST", "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a b":"c"}}}`, http.StatusUnprocessableEntity},
		{"namespace mismatch", "POST", "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"other"}}`, http.StatusBadRequest},
		{"huge body", "POST", "/api/v1/namespaces/default/configmaps", `{"data":{"a":"` + strings.Repeat("x", 4<<20) + `"}}`, http.StatusRequestEntityTooLarge},
		{"traversal in name", "GET", "/api/v1/namespaces/default/configmaps/..", "", http.StatusBadRequest},
		{"unknown resource", "GET", "/api/v1/namespaces/default/widgets", "", http.StatusNotFound},
		{"bad label selector", "GET", "/api/v1/configmaps?labelSelector=a%20%3D%3D%3D", "", http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, cfg.Host+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d (%s), want %d", resp.StatusCode, body, tc.want)
			}
			if !strings.Contains(string(body), `"kind":"Status"`) {
				t.Fatalf("body is not a Status: %s", body)
			}
		})
	}
	if after := configMaps(); !slices.Equal(after, before) {
		t.Fatalf("bad requests changed the ConfigMaps: %v, before them %v", after, before)
	}
}

// TestServer_Table: kubectl's Accept header gets a Table with its columns.
func TestServer_Table(t *testing.T) {
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", cfg.Host+"/api/v1/namespaces/default/pods", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`"kind":"Table"`, `"name":"Ready"`, `"name":"Status"`, `"cells":["p","0/1","Pending","0"`, `"kind":"PartialObjectMetadata"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("table lacks %s: %s", want, body)
		}
	}
}
