package namespace

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

var (
	configmaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// discovered is what the fake discovery serves: configmaps (with
// deletecollection), deployments (delete only), and a subresource and a
// read-only resource that must be left alone.
var discovered = []*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: metav1.Verbs{"list", "delete", "deletecollection"}},
		{Name: "pods/status", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get", "update"}},
		{Name: "bindings", Namespaced: true, Kind: "Binding", Verbs: metav1.Verbs{"create"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", Namespaced: true, Kind: "Deployment", Verbs: metav1.Verbs{"list", "delete"}},
	}},
}

// fixture is a controller over fake clients.
type fixture struct {
	client   *fake.Clientset
	metadata *metadatafake.FakeMetadataClient
	ctrl     *Controller
}

func newFixture(t *testing.T, ns *corev1.Namespace, content ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{client: fake.NewClientset(ns)}
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	f.metadata = metadatafake.NewSimpleMetadataClient(scheme, content...)
	// The fake tracker has no deletecollection: delete each object of the
	// namespace, or only mark it if it has finalizers, as a server would.
	f.metadata.PrependReactor("delete-collection", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		tracker := f.metadata.Tracker()
		gvr, ns := action.GetResource(), action.GetNamespace()
		list, err := tracker.List(gvr, schema.GroupVersionKind{Group: "fake-metadata-client-group", Version: "v1"}, ns)
		if err != nil {
			return true, nil, err
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			obj := item.(*metav1.PartialObjectMetadata)
			if len(obj.Finalizers) > 0 {
				now := metav1.Now()
				obj.DeletionTimestamp = &now
				if err := tracker.Update(gvr, obj, ns); err != nil {
					return true, nil, err
				}
				continue
			}
			if err := tracker.Delete(gvr, ns, obj.Name); err != nil {
				return true, nil, err
			}
		}
		return true, nil, nil
	})
	inf := informers.NewSharedInformerFactory(f.client, 0)
	nsInformer := inf.Core().V1().Namespaces()
	if err := nsInformer.Informer().GetIndexer().Add(ns); err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(Options{
		Client: f.client, Metadata: f.metadata, Namespaces: nsInformer,
		Discover: func() ([]*metav1.APIResourceList, error) { return discovered, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = ctrl
	return f
}

func deletedNamespace(name string) *corev1.Namespace {
	now := metav1.Now()
	return &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, DeletionTimestamp: &now},
		Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating},
	}
}

func object(apiVersion, kind, ns, name string, finalizers ...string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
	}
}

func (f *fixture) exists(t *testing.T, gvr schema.GroupVersionResource, ns, name string) bool {
	t.Helper()
	_, err := f.metadata.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func (f *fixture) condition(t *testing.T, ns string, typ corev1.NamespaceConditionType) corev1.NamespaceCondition {
	t.Helper()
	got, err := f.client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	t.Fatalf("namespace %s has no %s condition: %+v", ns, typ, got.Status.Conditions)
	return corev1.NamespaceCondition{}
}

// TestSync_EmptiesAndFinalizes: every listable, deletable namespaced
// resource of the namespace is emptied (by deletecollection or one delete
// each), other namespaces are untouched, then the finalizer is removed
// and the namespace deleted.
func TestSync_EmptiesAndFinalizes(t *testing.T) {
	f := newFixture(t, deletedNamespace("doomed"),
		object("v1", "ConfigMap", "doomed", "a"), object("v1", "ConfigMap", "doomed", "b"),
		object("v1", "ConfigMap", "other", "keep"), object("apps/v1", "Deployment", "doomed", "web"))
	if err := f.ctrl.Sync(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	if f.exists(t, configmaps, "doomed", "a") || f.exists(t, configmaps, "doomed", "b") || f.exists(t, deployments, "doomed", "web") {
		t.Fatal("content of the namespace is left")
	}
	if !f.exists(t, configmaps, "other", "keep") {
		t.Fatal("another namespace's object was deleted")
	}
	var finalized, deleted bool
	for _, a := range f.client.Actions() {
		finalized = finalized || (a.GetVerb() == "create" && a.GetSubresource() == "finalize")
		deleted = deleted || (a.GetVerb() == "delete" && a.GetResource().Resource == "namespaces")
	}
	if !finalized || !deleted {
		t.Fatalf("finalized %v, deleted %v; actions %v", finalized, deleted, f.client.Actions())
	}
	for _, a := range f.metadata.Actions() {
		if a.GetResource().Resource == "pods" || a.GetResource().Resource == "bindings" {
			t.Fatalf("touched %s, which cannot be listed and deleted", a.GetResource().Resource)
		}
	}
}

// TestSync_ContentRemaining: objects held by finalizers keep the
// namespace: the conditions say what remains, the finalizer stays, and
// Sync asks to be called again.
func TestSync_ContentRemaining(t *testing.T) {
	f := newFixture(t, deletedNamespace("doomed"), object("v1", "ConfigMap", "doomed", "held", "example.com/keep"))
	err := f.ctrl.Sync(context.Background(), "doomed")
	var remaining *RemainingError
	if !errors.As(err, &remaining) || remaining.Wait != 15*time.Second {
		t.Fatalf("got %v, want a RemainingError of 15s", err)
	}
	if c := f.condition(t, "doomed", corev1.NamespaceContentRemaining); c.Status != corev1.ConditionTrue || c.Message != "Some resources are remaining: configmaps has 1 resource instances" {
		t.Fatalf("ContentRemaining: %+v", c)
	}
	if c := f.condition(t, "doomed", corev1.NamespaceFinalizersRemaining); c.Status != corev1.ConditionTrue || c.Message != "Some content in the namespace has finalizers remaining: example.com/keep in 1 resource instances" {
		t.Fatalf("FinalizersRemaining: %+v", c)
	}
	if c := f.condition(t, "doomed", corev1.NamespaceDeletionContentFailure); c.Status != corev1.ConditionFalse {
		t.Fatalf("ContentFailure: %+v", c)
	}
	ns, _ := f.client.CoreV1().Namespaces().Get(context.Background(), "doomed", metav1.GetOptions{})
	if !hasFinalizer(ns) {
		t.Fatal("the finalizer was removed while content remains")
	}
}

// TestSync_DiscoveryFailure: what discovery found is deleted, the failure
// is recorded as a condition and the namespace is not finalized.
func TestSync_DiscoveryFailure(t *testing.T) {
	f := newFixture(t, deletedNamespace("doomed"), object("v1", "ConfigMap", "doomed", "a"))
	f.ctrl.opts.Discover = func() ([]*metav1.APIResourceList, error) {
		return discovered[:1], errors.New("apps/v1: the server is currently unable to handle the request")
	}
	if err := f.ctrl.Sync(context.Background(), "doomed"); err == nil {
		t.Fatal("Sync succeeded with a discovery failure")
	}
	if f.exists(t, configmaps, "doomed", "a") {
		t.Fatal("discovered content was not deleted")
	}
	if c := f.condition(t, "doomed", corev1.NamespaceDeletionDiscoveryFailure); c.Status != corev1.ConditionTrue || c.Reason != "DiscoveryFailed" {
		t.Fatalf("DiscoveryFailure: %+v", c)
	}
	ns, _ := f.client.CoreV1().Namespaces().Get(context.Background(), "doomed", metav1.GetOptions{})
	if !hasFinalizer(ns) {
		t.Fatal("finalized despite the discovery failure")
	}
}

// TestSync_LiveNamespace: a namespace that is not being deleted is left
// alone.
func TestSync_LiveNamespace(t *testing.T) {
	ns := deletedNamespace("live")
	ns.DeletionTimestamp = nil
	f := newFixture(t, ns, object("v1", "ConfigMap", "live", "a"))
	if err := f.ctrl.Sync(context.Background(), "live"); err != nil {
		t.Fatal(err)
	}
	if len(f.client.Actions()) != 0 || len(f.metadata.Actions()) != 0 {
		t.Fatalf("actions on a live namespace: %v %v", f.client.Actions(), f.metadata.Actions())
	}
	if err := f.ctrl.Sync(context.Background(), "missing"); err != nil {
		t.Fatalf("a missing namespace: %v", err)
	}
}
