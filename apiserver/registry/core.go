package registry

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// coreResources are the core/v1 resources served so far.
func coreResources() []*Resource {
	gv := corev1.SchemeGroupVersion
	return []*Resource{
		{
			GVK: gv.WithKind("Namespace"), Plural: "namespaces", Singular: "namespace", ShortNames: []string{"ns"},
			New: func() runtime.Object { return &corev1.Namespace{} }, NewList: func() runtime.Object { return &corev1.NamespaceList{} },
			StoragePrefix: "/namespaces", Status: true,
			PrepareForCreate: func(obj runtime.Object) {
				ns := obj.(*corev1.Namespace)
				ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
				if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
					ns.Spec.Finalizers = append(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
				}
			},
			Fields: func(obj runtime.Object) fields.Set {
				return fields.Set{"status.phase": string(obj.(*corev1.Namespace).Status.Phase)}
			},
		},
		{
			GVK: gv.WithKind("ConfigMap"), Plural: "configmaps", Singular: "configmap", ShortNames: []string{"cm"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.ConfigMap{} }, NewList: func() runtime.Object { return &corev1.ConfigMapList{} },
			StoragePrefix: "/configmaps",
		},
		{
			GVK: gv.WithKind("Secret"), Plural: "secrets", Singular: "secret", Namespaced: true,
			New: func() runtime.Object { return &corev1.Secret{} }, NewList: func() runtime.Object { return &corev1.SecretList{} },
			StoragePrefix: "/secrets",
			Fields: func(obj runtime.Object) fields.Set {
				return fields.Set{"type": string(obj.(*corev1.Secret).Type)}
			},
		},
		{
			GVK: gv.WithKind("ServiceAccount"), Plural: "serviceaccounts", Singular: "serviceaccount", ShortNames: []string{"sa"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.ServiceAccount{} }, NewList: func() runtime.Object { return &corev1.ServiceAccountList{} },
			StoragePrefix: "/serviceaccounts",
		},
		{
			GVK: gv.WithKind("Pod"), Plural: "pods", Singular: "pod", ShortNames: []string{"po"}, Categories: []string{"all"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.Pod{} }, NewList: func() runtime.Object { return &corev1.PodList{} },
			StoragePrefix: "/pods", Status: true, ObjectSubresources: []string{"ephemeralcontainers", "resize"},
			PrepareForCreate: func(obj runtime.Object) {
				pod := obj.(*corev1.Pod)
				pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
			},
			Fields: func(obj runtime.Object) fields.Set {
				p := obj.(*corev1.Pod)
				return fields.Set{
					"spec.nodeName": p.Spec.NodeName, "spec.restartPolicy": string(p.Spec.RestartPolicy),
					"spec.schedulerName": p.Spec.SchedulerName, "spec.serviceAccountName": p.Spec.ServiceAccountName,
					"spec.hostNetwork": boolString(p.Spec.HostNetwork), "status.phase": string(p.Status.Phase),
					"status.podIP": p.Status.PodIP, "status.nominatedNodeName": p.Status.NominatedNodeName,
				}
			},
		},
		{
			GVK: gv.WithKind("Node"), Plural: "nodes", Singular: "node", ShortNames: []string{"no"},
			New: func() runtime.Object { return &corev1.Node{} }, NewList: func() runtime.Object { return &corev1.NodeList{} },
			StoragePrefix: "/minions", Status: true,
			Fields: func(obj runtime.Object) fields.Set {
				return fields.Set{"spec.unschedulable": boolString(obj.(*corev1.Node).Spec.Unschedulable)}
			},
		},
		{
			GVK: gv.WithKind("Service"), Plural: "services", Singular: "service", ShortNames: []string{"svc"}, Categories: []string{"all"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.Service{} }, NewList: func() runtime.Object { return &corev1.ServiceList{} },
			StoragePrefix: "/services/specs", Status: true,
			Fields: func(obj runtime.Object) fields.Set {
				svc := obj.(*corev1.Service)
				return fields.Set{"spec.clusterIP": svc.Spec.ClusterIP, "spec.type": string(svc.Spec.Type)}
			},
		},
		{
			GVK: gv.WithKind("Endpoints"), Plural: "endpoints", Singular: "endpoints", ShortNames: []string{"ep"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.Endpoints{} }, NewList: func() runtime.Object { return &corev1.EndpointsList{} },
			StoragePrefix: "/services/endpoints",
		},
		{
			GVK: gv.WithKind("Event"), Plural: "events", Singular: "event", ShortNames: []string{"ev"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.Event{} }, NewList: func() runtime.Object { return &corev1.EventList{} },
			StoragePrefix: "/events", Fields: eventFields, // events.go
		},
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// SystemNamespaces exist on every cluster (bootstrap creates them) and
// cannot be deleted: Kubernetes' NamespaceLifecycle protects default,
// kube-system and kube-public; kube-node-lease is protected here too,
// since node agents' heartbeats depend on it.
var SystemNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}
