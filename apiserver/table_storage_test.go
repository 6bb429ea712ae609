package apiserver_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestTable_VolumesAndQuotas(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	gi := resource.MustParse("5Gi")
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: gi},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany},
			ClaimRef:    &corev1.ObjectReference{Namespace: "default", Name: "data"}, StorageClassName: "local",
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/disk-1"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tbl := getTable(t, cfg, "/api/v1/persistentvolumes")
	checkColumns(t, tbl, "Name", "Capacity", "Access Modes", "Reclaim Policy", "Status", "Claim", "StorageClass", "VolumeAttributesClass", "Reason", "Age", "wide:VolumeMode")
	// Defaults: Retain for a statically made volume, Filesystem; the
	// strategy starts it Pending.
	checkRows(t, tbl, 0, map[string][]any{
		"disk-1": {"disk-1", "5Gi", "RWO,ROX", "Retain", "Pending", "default/data", "local", "<unset>", "", anAge{}, "Filesystem"},
	})

	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: gi}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tbl = getTable(t, cfg, "/api/v1/namespaces/default/persistentvolumeclaims")
	checkColumns(t, tbl, "Name", "Status", "Volume", "Capacity", "Access Modes", "StorageClass", "VolumeAttributesClass", "Age", "wide:VolumeMode")
	checkRows(t, tbl, 0, map[string][]any{
		"data": {"data", "Pending", "", "", "", "", "<unset>", anAge{}, "Filesystem"},
	})

	quota, err := cs.CoreV1().ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceLimitsCPU: resource.MustParse("4"),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	quota.Status = corev1.ResourceQuotaStatus{
		Hard: quota.Spec.Hard,
		Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3"), corev1.ResourceLimitsCPU: resource.MustParse("1500m")},
	}
	if _, err := cs.CoreV1().ResourceQuotas("default").UpdateStatus(ctx, quota, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tbl = getTable(t, cfg, "/api/v1/namespaces/default/resourcequotas")
	checkColumns(t, tbl, "Name", "Age", "Request", "Limit")
	checkRows(t, tbl, 0, map[string][]any{
		"compute": {"compute", anAge{}, "pods: 3/10", "limits.cpu: 1500m/4"},
	})
}
