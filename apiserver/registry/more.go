package registry

import (
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// storageResources are core/v1's volume, limit and quota resources;
// eventResources events.k8s.io/v1's events, which share core events'
// storage (stored as core/v1 Events under /events, as kube-apiserver does,
// so each group reads the other's).
func storageResources() []*Resource {
	gv := corev1.SchemeGroupVersion
	return []*Resource{
		{
			GVK: gv.WithKind("PersistentVolume"), Plural: "persistentvolumes", Singular: "persistentvolume", ShortNames: []string{"pv"},
			New: func() runtime.Object { return &corev1.PersistentVolume{} }, NewList: func() runtime.Object { return &corev1.PersistentVolumeList{} },
			StoragePrefix: "/persistentvolumes", Status: true,
		},
		{
			GVK: gv.WithKind("PersistentVolumeClaim"), Plural: "persistentvolumeclaims", Singular: "persistentvolumeclaim", ShortNames: []string{"pvc"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.PersistentVolumeClaim{} }, NewList: func() runtime.Object { return &corev1.PersistentVolumeClaimList{} },
			StoragePrefix: "/persistentvolumeclaims", Status: true,
		},
		{
			GVK: gv.WithKind("LimitRange"), Plural: "limitranges", Singular: "limitrange", ShortNames: []string{"limits"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.LimitRange{} }, NewList: func() runtime.Object { return &corev1.LimitRangeList{} },
			StoragePrefix: "/limitranges",
		},
		{
			GVK: gv.WithKind("ResourceQuota"), Plural: "resourcequotas", Singular: "resourcequota", ShortNames: []string{"quota"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.ResourceQuota{} }, NewList: func() runtime.Object { return &corev1.ResourceQuotaList{} },
			StoragePrefix: "/resourcequotas", Status: true,
		},
	}
}

func eventResources() []*Resource {
	core := corev1.SchemeGroupVersion
	return []*Resource{{
		GVK: eventsv1.SchemeGroupVersion.WithKind("Event"), Plural: "events", Singular: "event", ShortNames: []string{"ev"}, Namespaced: true,
		New: func() runtime.Object { return &eventsv1.Event{} }, NewList: func() runtime.Object { return &eventsv1.EventList{} },
		StoragePrefix: "/events", StorageVersion: &core,
		Fields: eventsV1Fields, // events.go
	}}
}
