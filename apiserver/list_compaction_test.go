package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/apiserver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// TestList_ContinueAfterCompaction is what Kubernetes' conformance test
// "should support continue listing from the last key if the original
// version has been compacted away" checks, with a short compaction
// interval: Kubernetes' compactor expires a continue token within two
// intervals (410 Gone with a token to go on at the latest revision), and
// that token lists the next page with the count of what remains after it.
func TestList_ContinueAfterCompaction(t *testing.T) {
	const total, limit = 30, 5
	cfg, _ := newServerWith(t, apiserver.Config{CompactionInterval: 200 * time.Millisecond})
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chunks"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pts := cs.CoreV1().PodTemplates("chunks")
	for i := range total {
		pt := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("template-%04d", i)},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}
		if _, err := pts.Create(ctx, pt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := pts.List(ctx, metav1.ListOptions{Limit: limit})
	if err != nil || first.Continue == "" || first.RemainingItemCount == nil || int(*first.RemainingItemCount)+len(first.Items) != total {
		t.Fatalf("first page: %v, %d items, %+v", err, len(first.Items), first.ListMeta)
	}
	// Writes elsewhere move the head on, as a busy cluster's do.
	var inconsistent string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		createConfigMaps(t, cs, fmt.Sprintf("tick-%d", time.Now().UnixNano()))
		_, err := pts.List(ctx, metav1.ListOptions{Limit: limit, Continue: first.Continue})
		if err == nil {
			return false, nil
		}
		if !apierrors.IsResourceExpired(err) {
			return false, err
		}
		st, ok := err.(apierrors.APIStatus)
		if !ok || st.Status().Continue == "" {
			return false, fmt.Errorf("410 without a continue token: %v", err)
		}
		inconsistent = st.Status().Continue
		return true, nil
	})
	if err != nil {
		t.Fatalf("the first page's continue token did not expire: %v", err)
	}
	page, err := pts.List(ctx, metav1.ListOptions{Limit: limit, Continue: inconsistent})
	if err != nil {
		t.Fatalf("list with the inconsistent token: %v", err)
	}
	if page.ResourceVersion == first.ResourceVersion || len(page.Items) != limit {
		t.Fatalf("second page at %s (first at %s) with %d items, want a newer revision and %d", page.ResourceVersion, first.ResourceVersion, len(page.Items), limit)
	}
	if page.RemainingItemCount == nil || int(*page.RemainingItemCount)+len(page.Items)+len(first.Items) != total {
		t.Fatalf("second page says %v remain after its %d items; want %d", page.RemainingItemCount, len(page.Items), total-2*limit)
	}
	for i, it := range page.Items {
		if want := fmt.Sprintf("template-%04d", limit+i); it.Name != want {
			t.Fatalf("second page item %d is %s, want %s", i, it.Name, want)
		}
	}
}
