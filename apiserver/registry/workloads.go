package registry

import (
	authenticationv1beta1 "k8s.io/api/authentication/v1beta1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/registry/authentication/selfsubjectreview"
)

// workloadResources are core/v1's replication controllers (+status,
// +scale), pod templates and component statuses, autoscaling's
// horizontal pod autoscalers (v2, and v1 over the same objects, stored as
// v2 as kube-apiserver stores them), node.k8s.io's runtime classes, and
// SelfSubjectReview in v1beta1, which kubectl 1.27 asks for (kube-apiserver
// 1.34 no longer serves it by default: v1 only; nor v1alpha1).
func workloadResources(run Running) []*Resource {
	core := corev1.SchemeGroupVersion
	rc := &Resource{
		GVK: core.WithKind("ReplicationController"), Plural: "replicationcontrollers", Singular: "replicationcontroller",
		ShortNames: []string{"rc"}, Categories: []string{"all"}, Namespaced: true, Status: true, Scale: true,
		New:     func() runtime.Object { return &corev1.ReplicationController{} },
		NewList: func() runtime.Object { return &corev1.ReplicationControllerList{} },
		// kube-apiserver's special prefix for them.
		StoragePrefix: "/controllers",
		Fields: func(obj runtime.Object) fields.Set {
			return fields.Set{"status.replicas": itoa32(obj.(*corev1.ReplicationController).Status.Replicas)}
		},
	}
	podTemplates := &Resource{
		GVK: core.WithKind("PodTemplate"), Plural: "podtemplates", Singular: "podtemplate", Namespaced: true,
		New:     func() runtime.Object { return &corev1.PodTemplate{} },
		NewList: func() runtime.Object { return &corev1.PodTemplateList{} }, StoragePrefix: "/podtemplates",
	}
	v2 := autoscalingv2.SchemeGroupVersion
	hpa := resource(v2.WithKind("HorizontalPodAutoscaler"), "horizontalpodautoscalers", "horizontalpodautoscaler", true, true,
		func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscaler{} },
		func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscalerList{} }, "hpa")
	hpaV1 := resource(autoscalingv1.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"), "horizontalpodautoscalers", "horizontalpodautoscaler", true, true,
		func() runtime.Object { return &autoscalingv1.HorizontalPodAutoscaler{} },
		func() runtime.Object { return &autoscalingv1.HorizontalPodAutoscalerList{} }, "hpa")
	hpaV1.StorageVersion = &v2
	hpa.Categories, hpaV1.Categories = []string{"all"}, []string{"all"}
	runtimeClasses := resource(nodev1.SchemeGroupVersion.WithKind("RuntimeClass"), "runtimeclasses", "runtimeclass", false, false,
		func() runtime.Object { return &nodev1.RuntimeClass{} }, func() runtime.Object { return &nodev1.RuntimeClassList{} })
	whoami := func(r *Resource) *Resource {
		r.CreateOnly = func() rest.Creater { return selfsubjectreview.NewREST() }
		return r
	}
	return []*Resource{
		rc, podTemplates, componentStatusesResource(run), hpa, hpaV1, runtimeClasses,
		whoami(&Resource{GVK: authenticationv1beta1.SchemeGroupVersion.WithKind("SelfSubjectReview"), Plural: "selfsubjectreviews", Singular: "selfsubjectreview",
			New: func() runtime.Object { return &authenticationv1beta1.SelfSubjectReview{} }}),
	}
}
