package storage_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	k8sstorage "k8s.io/apiserver/pkg/storage"
)

// TestNewCached_IndexLabels lists pods by an indexed label from the watch
// cache: the index answers exactly the pods carrying that value, and a
// selector the index cannot answer still filters correctly.
func TestNewCached_IndexLabels(t *testing.T) {
	ctx := context.Background()
	cached := newCachedPods(t, []string{"app"})
	pods := map[string]map[string]string{
		"a1": {"app": "a"}, "a2": {"app": "a", "tier": "web"}, "b1": {"app": "b"}, "none": nil,
	}
	var rv string
	for name, l := range pods {
		out := &corev1.Pod{}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: l}}
		if err := cached.Create(ctx, "/pods/default/"+name, pod, out, 0); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		rv = out.ResourceVersion // creates are sequential: the last is the newest
	}
	deadline := time.Now().Add(20 * time.Second)
	for !cached.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("watch cache not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, tc := range []struct{ selector, want string }{
		{"app=a", "a1,a2"},
		{"app=b", "b1"},
		{"app=c", ""},
		{"app!=a", "b1,none"},
		{"app=a,tier=web", "a2"},
	} {
		sel, err := labels.Parse(tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		pred := k8sstorage.SelectionPredicate{
			Label: sel, Field: fields.Everything(), IndexLabels: []string{"app"},
			GetAttrs: func(obj runtime.Object) (labels.Set, fields.Set, error) {
				return obj.(*corev1.Pod).Labels, nil, nil
			},
		}
		// Not older than the last create, so served from the cache once
		// it has caught up.
		list := &corev1.PodList{}
		if err := cached.GetList(ctx, "/pods/", k8sstorage.ListOptions{
			ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			Predicate: pred, Recursive: true,
		}, list); err != nil {
			t.Fatalf("%s: %v", tc.selector, err)
		}
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		if got := strings.Join(names, ","); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.selector, got, tc.want)
		}
	}
}
