package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/internal/teststore"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// widgetCRD is a namespaced CRD with a schema (a default, a bounded
// integer, a preserved free-form field), status and scale subresources
// and printer columns.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	minReplicas := 0.0
	selectorPath := ".status.selector"
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "widgets", Singular: "widget", Kind: "Widget", ShortNames: []string{"wd"}, Categories: []string{"all"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"color":    {Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"blue"`)}},
							"replicas": {Type: "integer", Minimum: &minReplicas},
							"extra":    {Type: "object", XPreserveUnknownFields: ptr.To(true)},
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"replicas": {Type: "integer"},
							"selector": {Type: "string"},
						}},
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale: &apiextensionsv1.CustomResourceSubresourceScale{
						SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas", LabelSelectorPath: &selectorPath,
					},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Color", Type: "string", JSONPath: ".spec.color"},
					{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
				},
			}},
		},
	}
}

// createEstablished creates crd and waits for its Established condition.
func createEstablished(t *testing.T, cfg *rest.Config, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx := context.Background()
	cs := apiextensionsclient.NewForConfigOrDie(cfg)
	if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitEstablished(t, cs, crd.Name)
}

// waitEstablished waits for the Established condition of CRD name.
func waitEstablished(t *testing.T, cs apiextensionsclient.Interface, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx := context.Background()
	var got *apiextensionsv1.CustomResourceDefinition
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v (status %+v)", name, err, got.Status)
	}
	return got
}

func widget(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app": name}},
		"spec":     spec,
	}}
}

func TestCRD_EstablishedNamesAndValidation(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	crd := createEstablished(t, cfg, widgetCRD())
	if crd.Status.AcceptedNames.Plural != "widgets" || crd.Status.AcceptedNames.ListKind != "WidgetList" {
		t.Fatalf("acceptedNames = %+v", crd.Status.AcceptedNames)
	}
	if len(crd.Status.StoredVersions) != 1 || crd.Status.StoredVersions[0] != "v1" {
		t.Fatalf("storedVersions = %v", crd.Status.StoredVersions)
	}
	cs := apiextensionsclient.NewForConfigOrDie(cfg)

	// Another CRD of the group asking for a taken name is not accepted.
	clash := widgetCRD()
	clash.Name = "gadgets.example.com"
	clash.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ShortNames: []string{"wd"}}
	if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, clash, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, clash.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("conflicting CRD: %v", err)
	}

	// An invalid CRD is 422 with causes.
	bad := widgetCRD()
	bad.Name = "wrong.example.com"
	_, err = cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, bad, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || len(err.(apierrors.APIStatus).Status().Details.Causes) == 0 {
		t.Fatalf("invalid CRD: got %v", err)
	}
}

func TestCRD_CustomResourceCRUD(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	createEstablished(t, cfg, widgetCRD())
	dyn := dynamic.NewForConfigOrDie(cfg)
	widgets := dyn.Resource(widgetsGVR).Namespace("default")

	// Create: defaults applied, unknown fields pruned (kept under the
	// preserved field), generation 1, status dropped.
	in := widget("w1", map[string]any{"replicas": int64(2), "unknown": "x", "extra": map[string]any{"free": "form"}})
	in.Object["status"] = map[string]any{"replicas": int64(9)}
	w1, err := widgets.Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(w1.Object, "spec", "color"); c != "blue" {
		t.Errorf("default color = %q", c)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(w1.Object, "spec", "unknown"); found {
		t.Errorf("unknown field kept: %v", w1.Object["spec"])
	}
	if f, _, _ := unstructured.NestedString(w1.Object, "spec", "extra", "free"); f != "form" {
		t.Errorf("preserved field lost: %v", w1.Object["spec"])
	}
	if _, found := w1.Object["status"]; found || w1.GetGeneration() != 1 || w1.GetUID() == "" {
		t.Errorf("created widget: %v", w1.Object)
	}

	// Schema validation: 422 with the field.
	_, err = widgets.Create(ctx, widget("w2", map[string]any{"replicas": int64(-1)}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.replicas") {
		t.Fatalf("invalid widget: got %v", err)
	}
	_, err = widgets.Create(ctx, widget("w2", map[string]any{"color": int64(3)}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("wrong type: got %v", err)
	}

	// Update: spec change bumps the generation, status kept.
	w1.Object["spec"].(map[string]any)["color"] = "red"
	w1, err = widgets.Update(ctx, w1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w1.GetGeneration() != 2 {
		t.Errorf("generation after spec update = %d", w1.GetGeneration())
	}
	// Status subresource: only status changes, generation stays.
	w1.Object["status"] = map[string]any{"replicas": int64(2), "selector": "app=w1"}
	w1.Object["spec"].(map[string]any)["color"] = "green"
	w1, err = widgets.UpdateStatus(ctx, w1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(w1.Object, "spec", "color"); c != "red" || w1.GetGeneration() != 2 {
		t.Errorf("status update changed spec: %v gen %d", w1.Object["spec"], w1.GetGeneration())
	}
	if r, _, _ := unstructured.NestedInt64(w1.Object, "status", "replicas"); r != 2 {
		t.Errorf("status = %v", w1.Object["status"])
	}

	// Patches: merge and JSON; strategic merge is 415.
	w1, err = widgets.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"color":"yellow"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(w1.Object, "spec", "color"); c != "yellow" {
		t.Errorf("merge patch: %v", w1.Object["spec"])
	}
	if _, err = widgets.Patch(ctx, "w1", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":3}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = widgets.Patch(ctx, "w1", types.StrategicMergePatchType, []byte(`{"spec":{"color":"x"}}`), metav1.PatchOptions{})
	if !apierrors.IsUnsupportedMediaType(err) {
		t.Fatalf("strategic merge patch: got %v", err)
	}
	// Server-side apply.
	applied, err := widgets.Apply(ctx, "w3", widget("w3", map[string]any{"color": "pink"}), metav1.ApplyOptions{FieldManager: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(applied.Object, "spec", "color"); c != "pink" || len(applied.GetManagedFields()) == 0 {
		t.Errorf("applied: %v", applied.Object)
	}

	// Scale subresource.
	sc, err := widgets.Get(ctx, "w1", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(sc.Object, "spec", "replicas"); r != 3 || sc.GetKind() != "Scale" {
		t.Errorf("scale = %v", sc.Object)
	}
	if sel, _, _ := unstructured.NestedString(sc.Object, "status", "selector"); sel != "app=w1" {
		t.Errorf("scale selector = %v", sc.Object["status"])
	}
	if _, err := widgets.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	got, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); r != 5 {
		t.Errorf("replicas after scale = %d", r)
	}

	// List with label and field selectors; watch.
	list, err := widgets.List(ctx, metav1.ListOptions{LabelSelector: "app=w1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].GetName() != "w1" || list.GetKind() != "WidgetList" {
		t.Fatalf("label-selected list: %v", list.Object)
	}
	list, err = dyn.Resource(widgetsGVR).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=w3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].GetName() != "w3" {
		t.Fatalf("field-selected list: %d items", len(list.Items))
	}
	w, err := widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := widgets.Delete(ctx, "w3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != "DELETED" || ev.Object.(*unstructured.Unstructured).GetName() != "w3" {
			t.Fatalf("watch event %s %v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}
	if err := widgets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.Get(ctx, "w1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after deletecollection: %v", err)
	}
}

func TestCRD_TableDiscoveryOpenAPIAndDeletion(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	createEstablished(t, cfg, widgetCRD())
	widgets := dynamic.NewForConfigOrDie(cfg).Resource(widgetsGVR).Namespace("default")
	if _, err := widgets.Create(ctx, widget("w1", map[string]any{"replicas": int64(4)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Table with the printer columns.
	req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/apis/example.com/v1/namespaces/default/widgets", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	err = json.NewDecoder(resp.Body).Decode(&table)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if strings.Join(cols, ",") != "Name,Color,Replicas" || len(table.Rows) != 1 {
		t.Fatalf("table columns %v, %d rows", cols, len(table.Rows))
	}
	if cells := table.Rows[0].Cells; cells[0] != "w1" || cells[1] != "blue" || cells[2] != float64(4) {
		t.Errorf("cells = %v", cells)
	}

	// Discovery.
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	rl, err := dc.ServerResourcesForGroupVersion("example.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, r := range rl.APIResources {
		found[r.Name] = true
		if r.Name == "widgets" && (r.Kind != "Widget" || !r.Namespaced || len(r.ShortNames) != 1 || r.SingularName != "widget") {
			t.Errorf("discovery of widgets: %+v", r)
		}
	}
	if !found["widgets"] || !found["widgets/status"] || !found["widgets/scale"] {
		t.Fatalf("discovery: %v", found)
	}

	// OpenAPI v3 and v2 have the schema.
	for _, path := range []string{"/openapi/v3/apis/example.com/v1", "/openapi/v2"} {
		resp, err := http.Get(cfg.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "com.example.v1.Widget") {
			t.Fatalf("%s: %d, no Widget schema", path, resp.StatusCode)
		}
	}

	// Deleting the CRD deletes its custom resources, then the CRD; the
	// resources leave discovery.
	cs := apiextensionsclient.NewForConfigOrDie(cfg)
	if err := cs.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, "widgets.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.example.com", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("CRD not deleted: %v", err)
	}
	if _, err := dc.ServerResourcesForGroupVersion("example.com/v1"); !apierrors.IsNotFound(err) {
		t.Fatalf("discovery after delete: %v", err)
	}
	// A new CRD of the same name starts with no custom resources.
	createEstablished(t, cfg, widgetCRD())
	list, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("custom resources survived their CRD: %d", len(list.Items))
	}
}

// TestCRD_TwoServersOneDatabase: a CRD created through one API server is
// served by another on the same storage, which learns of it by watching.
func TestCRD_TwoServersOneDatabase(t *testing.T) {
	ctx := context.Background()
	cfgA, cfgB := newServerPair(t)
	createEstablished(t, cfgA, widgetCRD())
	onB := dynamic.NewForConfigOrDie(cfgB).Resource(widgetsGVR).Namespace("default")
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := onB.Create(ctx, widget("w1", map[string]any{"replicas": int64(1)}), metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil // not served on B yet
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create on the second server: %v", err)
	}
	got, err := dynamic.NewForConfigOrDie(cfgA).Resource(widgetsGVR).Namespace("default").Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(got.Object, "spec", "color"); c != "blue" {
		t.Fatalf("widget read through the first server: %v", got.Object)
	}
}

// newServerPair starts two API servers over one in-process store, as two
// processes share a database.
func newServerPair(t *testing.T) (*rest.Config, *rest.Config) {
	t.Helper()
	srv := teststore.Server(t, t.TempDir())
	var cfgs []*rest.Config
	for range 2 {
		client := teststore.Client(t, srv)
		api, err := apiserver.New(apiserver.Config{Client: client, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		if err := api.Bootstrap(context.Background()); err != nil { // the default namespace
			t.Fatal(err)
		}
		hs := httptest.NewServer(api.Handler())
		t.Cleanup(func() {
			hs.CloseClientConnections()
			hs.Close()
			api.Close()
		})
		cfgs = append(cfgs, &rest.Config{Host: hs.URL})
	}
	return cfgs[0], cfgs[1]
}

// TestCRD_OpenAPIWhileServing reads the OpenAPI documents without pause
// while CRDs are created, served and deleted: the CRD controller marks the
// documents stale while it holds its lock, and building them reads the
// CRDs it serves, which once deadlocked the two (a host restarted with a
// Tenant CRD hung its API that way).
func TestCRD_OpenAPIWhileServing(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	cfg.Timeout = time.Minute // a deadlock fails the test, not the package's run
	cs := apiextensionsclient.NewForConfigOrDie(cfg)
	rc := kubernetes.NewForConfigOrDie(cfg).Discovery().RESTClient()
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				readerDone <- nil
				return
			default:
			}
			if _, err := rc.Get().AbsPath("/openapi/v2").DoRaw(ctx); err != nil {
				readerDone <- err
				return
			}
		}
	}()
	// Many at once, so that the controller serves them back to back.
	for round := range 3 {
		var names []string
		for i := range 6 {
			crd := widgetCRD()
			crd.Spec.Group = fmt.Sprintf("g%d-%d.example.com", round, i)
			crd.Name = "widgets." + crd.Spec.Group
			if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, crd.Name)
		}
		for _, name := range names {
			waitEstablished(t, cs, name)
		}
		for _, name := range names {
			if err := cs.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	select {
	case err := <-readerDone:
		if err != nil {
			t.Fatalf("GET /openapi/v2: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("GET /openapi/v2 did not return")
	}
	// Neither the documents nor the CRD controller are stuck.
	crd := widgetCRD()
	createEstablished(t, cfg, crd)
	doc, err := rc.Get().AbsPath("/openapi/v2").DoRaw(ctx)
	if err != nil || !strings.Contains(string(doc), "com.example.v1.Widget") {
		t.Fatalf("GET /openapi/v2 after the churn: %v (has the widget: %v)", err, strings.Contains(string(doc), "com.example.v1.Widget"))
	}
}
