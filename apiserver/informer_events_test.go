package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// TestInformer_RecreateAndPatch takes objects through the steps of
// Kubernetes' conformance framework (TestResource in
// test/e2e/framework/conformance, which five v1.37 conformance tests use):
// label-selected dynamic informers started as it starts them (one over
// the cluster and, for a namespaced resource, one over the namespace) see
// an object created and updated, then, round after round, deleted, created
// again and patched with each patch type in turn. After each step the
// events they saw must be the framework's (after a patch: add, then at
// least one update), while other informers watch the same objects, as
// kubelets and controllers do in a cluster.
//
// No informer may list again: one does only when its watch ends with an
// error, and the events in between then reach it as one. That happened
// when watchers that shared an event's object encoded it at the same time
// (encoders write apiVersion and kind into the object while they encode
// it): some sent the event without a kind, their clients could not decode
// it and listed again, and a create and a patch reached them as a single
// add, as in the conformance test "ClusterTrustBundles CRUD".
func TestInformer_RecreateAndPatch(t *testing.T) {
	cfg := newServer(t)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	initialPEM, updatedPEM := caCertificatePEM(t), caCertificatePEM(t)
	csr := stubPKCS10Request(t)
	for _, tc := range []informerCase{{
		// Stored through the internal version, as kube-apiserver
		// does: objects read back carry no apiVersion and kind.
		gvr: schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "clustertrustbundles"},
		object: map[string]any{
			"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
			"spec": map[string]any{"trustBundle": initialPEM},
		},
		path: []string{"spec", "trustBundle"}, value: updatedPEM,
	}, {
		gvr: schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}, namespace: "default",
		object: map[string]any{
			"apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
			"spec": map[string]any{
				"signerName": "example.com/signer", "podName": "pod", "podUID": "uid-pod",
				"serviceAccountName": "default", "serviceAccountUID": "uid-sa", "nodeName": "node", "nodeUID": "uid-node",
				"maxExpirationSeconds": int64(86400), "stubPKCS10Request": csr,
			},
		},
		path: []string{"metadata", "labels", "patched"}, value: "yes",
	}} {
		t.Run(tc.gvr.Resource, func(t *testing.T) { runInformerRounds(t, cfg, tc, 100) })
	}
}

// informerCase is a resource and the object its rounds take through it.
type informerCase struct {
	gvr       schema.GroupVersionResource
	namespace string
	// object is the object created, without its name; an update and
	// every patch set the field at path to value.
	object map[string]any
	path   []string
	value  string
}

// otherInformers is how many informers watch the objects besides the
// framework's.
const otherInformers = 16

// runInformerRounds runs rounds of delete, create again and patch (each
// patch type in turn) after a create and an update.
func runInformerRounds(t *testing.T, cfg *rest.Config, tc informerCase, rounds int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const label = "e2e-test.kubernetes.io"
	value := "informer-rounds-" + tc.gvr.Resource
	var client dynamic.ResourceInterface = dynamic.NewForConfigOrDie(cfg).Resource(tc.gvr)
	if tc.namespace != "" {
		client = dynamic.NewForConfigOrDie(cfg).Resource(tc.gvr).Namespace(tc.namespace)
	}

	// Every informer lists once, when it starts (a watch-list request,
	// or a list if the server does not stream lists).
	lists := &listCounter{relisted: make(chan struct{})}
	infCfg := rest.CopyConfig(cfg)
	infCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return lists.wrap(rt) })
	infClient := dynamic.NewForConfigOrDie(infCfg)
	start := func(namespace string, handler cache.ResourceEventHandler) cache.SharedIndexInformer {
		inf := dynamicinformer.NewFilteredDynamicInformer(infClient, tc.gvr, namespace, 0, nil, func(o *metav1.ListOptions) {
			o.LabelSelector = label + "=" + value
		}).Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			t.Fatal(err)
		}
		lists.informers.Add(1)
		go inf.RunWithContext(ctx)
		return inf
	}
	watched := []*eventLog{{name: "cluster informer", changed: make(chan struct{})}}
	if tc.namespace != "" {
		watched = append(watched, &eventLog{name: "namespace informer", changed: make(chan struct{})})
	}
	synced := []cache.InformerSynced{start("", watched[0]).HasSynced}
	if tc.namespace != "" {
		synced = append(synced, start(tc.namespace, watched[1]).HasSynced)
	}
	for range otherInformers {
		synced = append(synced, start("", cache.ResourceEventHandlerFuncs{}).HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers did not sync")
	}

	// verify waits until each watched informer's events since the last
	// step match want, ending with one at rv (any, if rv is ""), and
	// fails as soon as an informer lists again.
	verify := func(step string, want, rv string) {
		t.Helper()
		re := regexp.MustCompile(want)
		timeout := time.NewTimer(10 * time.Second)
		defer timeout.Stop()
		for _, l := range watched {
			for {
				events, changed := l.state()
				if re.MatchString(typesOf(events)) && (rv == "" || strings.HasSuffix(events[len(events)-1], "@"+rv)) {
					break
				}
				select {
				case <-changed:
				case <-lists.relisted:
					t.Fatalf("%s: an informer listed again (%s); %s saw %v, want %s ending at %q", step, lists.String(), l.name, events, want, rv)
				case <-timeout.C:
					t.Fatalf("%s: %s saw %v, want %s ending at %q", step, l.name, events, want, rv)
				}
			}
		}
		for _, l := range watched {
			l.reset()
		}
	}

	obj := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range tc.object {
		obj.Object[k] = v
	}
	obj.SetName("informer-rounds")
	obj.SetNamespace(tc.namespace)
	obj.SetLabels(map[string]string{label: value})
	created, err := client.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	verify("create", `^add,(update,)*$`, created.GetResourceVersion())
	if err := unstructured.SetNestedField(created.Object, tc.value, tc.path...); err != nil {
		t.Fatal(err)
	}
	updated, err := client.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	verify("update", `^(update,)+$`, updated.GetResourceVersion())

	patches := frameworkPatches(tc.path, tc.value)
	for round := range rounds {
		patch := patches[round%len(patches)]
		if err := client.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("round %d: get after delete: %v", round, err)
		}
		verify(fmt.Sprintf("round %d: delete", round), `^(update,)*delete,$`, "")
		created, err := client.Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		opts := metav1.PatchOptions{FieldValidation: "Strict"}
		if patch.typ == types.ApplyPatchType {
			opts.FieldManager, opts.Force = "test-apply", new(true)
		}
		patched, err := client.Patch(ctx, obj.GetName(), patch.typ, patch.data(created), opts)
		if err != nil {
			t.Fatalf("round %d: %s: %v", round, patch.typ, err)
		}
		verify(fmt.Sprintf("round %d: create at %s, %s", round, created.GetResourceVersion(), patch.typ),
			`^add,(update,)+$`, patched.GetResourceVersion())
	}
}

// patchCase is one patch; data makes it for the object it patches.
type patchCase struct {
	typ  types.PatchType
	data func(existing *unstructured.Unstructured) []byte
}

// frameworkPatches are the conformance framework's four patches, in its
// order, each setting the field at path to value: the strategic merge,
// apply and merge patches carry the object's name, namespace, UID,
// apiVersion and kind, as the framework's do.
func frameworkPatches(path []string, value string) []patchCase {
	object := func(existing *unstructured.Unstructured) []byte {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		_ = unstructured.SetNestedField(u.Object, value, path...)
		u.SetNamespace(existing.GetNamespace())
		u.SetName(existing.GetName())
		u.SetUID(existing.GetUID())
		u.SetAPIVersion(existing.GetAPIVersion())
		u.SetKind(existing.GetKind())
		data, _ := u.MarshalJSON()
		return data
	}
	v, _ := json.Marshal(value)
	pointer := strings.Join(path, "/")
	jsonPatch := []byte(fmt.Sprintf(`[{"op":"add","path":"/%s","value":%s}]`, pointer, v))
	return []patchCase{
		{types.StrategicMergePatchType, object},
		{types.ApplyPatchType, object},
		{types.MergePatchType, object},
		{types.JSONPatchType, func(*unstructured.Unstructured) []byte { return jsonPatch }},
	}
}

// eventLog records an informer's notifications as add@RV, update@RV and
// delete@RV.
type eventLog struct {
	name    string
	mu      sync.Mutex // guards events and changed
	events  []string
	changed chan struct{} // closed and replaced on every event
}

func (l *eventLog) record(typ string, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	rv := "?"
	if m, err := meta.Accessor(obj); err == nil {
		rv = m.GetResourceVersion()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, typ+"@"+rv)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *eventLog) OnAdd(obj any, _ bool)  { l.record("add", obj) }
func (l *eventLog) OnUpdate(_, newObj any) { l.record("update", newObj) }
func (l *eventLog) OnDelete(obj any)       { l.record("delete", obj) }

// state returns the events so far and a channel closed at the next one.
func (l *eventLog) state() ([]string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...), l.changed
}

func (l *eventLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = nil
}

// typesOf renders events as the framework's eventList.Types does:
// "add,update,".
func typesOf(events []string) string {
	var b strings.Builder
	for _, e := range events {
		typ, _, _ := strings.Cut(e, "@")
		b.WriteString(typ + ",")
	}
	return b.String()
}

// listCounter counts the informers' lists (and watch-lists) and closes
// relisted when there are more than informers.
type listCounter struct {
	informers atomic.Int64
	mu        sync.Mutex // guards requests and closed
	requests  []string
	closed    bool
	relisted  chan struct{}
}

func (c *listCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		if q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true" {
			c.mu.Lock()
			c.requests = append(c.requests, req.URL.RawQuery)
			if int64(len(c.requests)) > c.informers.Load() && !c.closed {
				c.closed = true
				close(c.relisted)
			}
			c.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (c *listCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d lists for %d informers: %s", len(c.requests), c.informers.Load(), strings.Join(c.requests, " "))
}
