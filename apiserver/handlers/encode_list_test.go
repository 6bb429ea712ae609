package handlers

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func testPods(n int) *corev1.PodList {
	l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "77", Continue: "abc"}}
	for i := range n {
		l.Items = append(l.Items, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("p%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", i)), ResourceVersion: fmt.Sprint(10 + i),
				Labels: map[string]string{"app": "web", "<html>": "&"}, CreationTimestamp: metav1.Unix(1700000000, 0),
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:containers":{}}}`)}}},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("100m")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		})
	}
	return l
}

// codecJSON is the list as the codec writes it.
func codecJSON(t *testing.T, list runtime.Object) []byte {
	t.Helper()
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	var buf bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(list.DeepCopyObject(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func cachedJSON(t *testing.T, list runtime.Object, cache *encodedItems) []byte {
	t.Helper()
	var buf bytes.Buffer
	ok, err := writeJSONList(func() io.Writer { return &buf }, list, corev1.SchemeGroupVersion.WithKind("PodList"), cache)
	if !ok || err != nil {
		t.Fatalf("writeJSONList: %v %v", ok, err)
	}
	return buf.Bytes()
}

// The cached encoding is byte for byte the codec's, before and after
// objects change.
func TestWriteJSONList_SameBytesAsTheCodec(t *testing.T) {
	cache := &encodedItems{}
	for _, n := range []int{1, 3} {
		list := testPods(n)
		if got, want := cachedJSON(t, list, cache), codecJSON(t, list); !bytes.Equal(got, want) {
			t.Fatalf("%d items:\n got %s\nwant %s", n, got, want)
		}
	}
	list := testPods(3)
	cachedJSON(t, list, cache) // warm
	// An object at a new resourceVersion is encoded again.
	list.Items[1].Spec.Containers[0].Image = "nginx:1.28"
	list.Items[1].ResourceVersion = "99"
	got, want := cachedJSON(t, list, cache), codecJSON(t, list)
	if !bytes.Equal(got, want) || !bytes.Contains(got, []byte("nginx:1.28")) {
		t.Fatalf("after an update:\n got %s\nwant %s", got, want)
	}
}

// Anything but a non-empty typed list is left to the codec.
func TestWriteJSONList_LeavesOthersToTheCodec(t *testing.T) {
	for name, obj := range map[string]runtime.Object{"a pod": &corev1.Pod{}, "an empty list": testPods(0)} {
		ok, err := writeJSONList(func() io.Writer { t.Fatalf("%s: started writing", name); return nil }, obj, corev1.SchemeGroupVersion.WithKind("PodList"), &encodedItems{})
		if ok || err != nil {
			t.Errorf("%s: %v %v, want false", name, ok, err)
		}
	}
}
