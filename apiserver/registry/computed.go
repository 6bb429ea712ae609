package registry

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// componentStatusesResource is core/v1's componentstatuses (deprecated
// upstream, still served): computed at each request, never stored.
// kube-apiserver probes the scheduler, the controller manager and each
// etcd server; sqlkube's controllers run in-process or elsewhere, so the
// list holds its storage only, as etcd-0.
func componentStatusesResource(run Running) *Resource {
	return &Resource{
		GVK: corev1.SchemeGroupVersion.WithKind("ComponentStatus"), Plural: "componentstatuses", Singular: "componentstatus",
		ShortNames: []string{"cs"},
		New:        func() runtime.Object { return &corev1.ComponentStatus{} }, NewList: func() runtime.Object { return &corev1.ComponentStatusList{} },
		Computed: func(ctx context.Context) (runtime.Object, error) { return run.ComponentStatuses(ctx), nil },
	}
}
