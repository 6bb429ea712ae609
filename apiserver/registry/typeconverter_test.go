package registry

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/utils/ptr"
)

// Every step of a sequence of updates by three managers leaves the same
// managedFields (times aside) with and without SkipManagedFields, for a
// typed object and for an unstructured one.
func TestSkipManagedFields_SameManagedFields(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvk := coordinationv1.SchemeGroupVersion.WithKind("Lease")
	newFM := func(t *testing.T, tc managedfields.TypeConverter) *managedfields.FieldManager {
		t.Helper()
		fm, err := managedfields.NewDefaultFieldManager(tc, scheme, scheme, scheme, gvk, gvk.GroupVersion(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return fm
	}
	type step struct {
		manager string
		edit    func(*coordinationv1.Lease)
	}
	steps := []step{
		{"kubelet", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = ptr.To("node-1")
			l.Spec.LeaseDurationSeconds = ptr.To[int32](40)
		}},
		{"kubelet", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: time.Unix(100, 0)} }},
		{"other", func(l *coordinationv1.Lease) { l.Labels = map[string]string{"a": "b"} }},
		{"kubelet", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: time.Unix(110, 0)} }},
		{"third", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil; l.Labels["c"] = "d" }},
		{"other", func(l *coordinationv1.Lease) { delete(l.Labels, "a") }},
	}
	run := func(t *testing.T, tc managedfields.TypeConverter, unstr bool) [][]metav1.ManagedFieldsEntry {
		fm := newFM(t, tc)
		live := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: "kube-node-lease"}}
		live.SetGroupVersionKind(gvk)
		var got [][]metav1.ManagedFieldsEntry
		for _, s := range steps {
			next := live.DeepCopy()
			s.edit(next)
			var liveObj, nextObj runtime.Object = live, next
			if unstr {
				liveObj, nextObj = toUnstructured(t, live), toUnstructured(t, next)
			}
			out, err := fm.Update(liveObj, nextObj, s.manager)
			if err != nil {
				t.Fatal(err)
			}
			updated := &coordinationv1.Lease{}
			if u, ok := out.(*unstructured.Unstructured); ok {
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, updated); err != nil {
					t.Fatal(err)
				}
			} else {
				updated = out.(*coordinationv1.Lease)
			}
			entries := updated.DeepCopy().ManagedFields
			for i := range entries {
				entries[i].Time = nil
			}
			got = append(got, entries)
			live = updated
			live.SetGroupVersionKind(gvk)
		}
		return got
	}
	for _, unstr := range []bool{false, true} {
		name := "typed"
		if unstr {
			name = "unstructured"
		}
		t.Run(name, func(t *testing.T) {
			want := run(t, managedfields.NewDeducedTypeConverter(), unstr)
			got := run(t, SkipManagedFields(managedfields.NewDeducedTypeConverter()), unstr)
			if len(want[len(want)-1]) != 3 {
				t.Fatalf("the sequence should end with 3 managers, got %d: %+v", len(want[len(want)-1]), want[len(want)-1])
			}
			for i := range want {
				if !apiequality.Semantic.DeepEqual(got[i], want[i]) {
					t.Errorf("step %d: managedFields\n got %+v\nwant %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// The object handed to ObjectToTyped keeps its managedFields.
func TestSkipManagedFields_InputUnchanged(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", ManagedFields: mf}}
	u := toUnstructured(t, lease)
	tc := SkipManagedFields(managedfields.NewDeducedTypeConverter())
	for _, obj := range []runtime.Object{lease, u} {
		tv, err := tc.ObjectToTyped(obj)
		if err != nil {
			t.Fatal(err)
		}
		if s := tv.AsValue().AsMap(); s == nil {
			t.Fatalf("%T: no map", obj)
		}
		if md, _ := tv.AsValue().AsMap().Get("metadata"); md == nil || md.AsMap().Has("managedFields") {
			t.Errorf("%T: the typed value has managedFields", obj)
		}
	}
	if len(lease.ManagedFields) != 1 {
		t.Errorf("typed input lost its managedFields")
	}
	if _, ok, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields"); !ok {
		t.Errorf("unstructured input lost its managedFields")
	}
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}
