package fake

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseCapacity(t *testing.T) {
	got, err := ParseCapacity("cpu=2, memory=4Gi,ephemeral-storage=20Gi,pods=10,example.com/gpu=2")
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"), corev1.ResourcePods: resource.MustParse("10"),
		"example.com/gpu": resource.MustParse("2"),
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g.Cmp(w) != 0 {
			t.Errorf("%s: got %v, want %v", k, got[k], w)
		}
	}
	for _, bad := range []string{"cpu", "=2", "cpu=lots"} {
		if _, err := ParseCapacity(bad); !errors.Is(err, ErrOptions) {
			t.Errorf("ParseCapacity(%q): got %v, want ErrOptions", bad, err)
		}
	}
}
