package scheme

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestCodecs_Default: what Codecs decode gets Kubernetes' defaults, as
// kube-apiserver's decoding does (the storage reads objects back through
// them: a new claim reads back Pending).
func TestCodecs_Default(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gv    schema.GroupVersion
		json  string
		into  runtime.Object
		check func(runtime.Object) (got, want string)
	}{
		{"claim phase", corev1.SchemeGroupVersion, `{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"data"}}`, &corev1.PersistentVolumeClaim{},
			func(o runtime.Object) (string, string) {
				return string(o.(*corev1.PersistentVolumeClaim).Status.Phase), string(corev1.ClaimPending)
			}},
		{"deployment strategy", appsv1.SchemeGroupVersion, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"}}`, &appsv1.Deployment{},
			func(o runtime.Object) (string, string) {
				return string(o.(*appsv1.Deployment).Spec.Strategy.Type), string(appsv1.RollingUpdateDeploymentStrategyType)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decoder := Codecs.UniversalDecoder(tc.gv)
			obj, _, err := decoder.Decode([]byte(tc.json), nil, tc.into)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tc.check(obj); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}
