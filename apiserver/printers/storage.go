package printers

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// Printers of persistent volumes and claims, limit ranges, resource quotas
// and events.k8s.io events, with kubectl's columns.

func storagePrinters() []printerEntry {
	return []printerEntry{
		{&corev1.PersistentVolume{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Capacity", "Storage the volume offers."),
			stringColumn("Access Modes", "How the volume may be mounted (RWO, ROX, RWX, RWOP)."),
			stringColumn("Reclaim Policy", "What happens to the volume when its claim is released."),
			stringColumn("Status", "Phase of the volume."),
			stringColumn("Claim", "The claim bound to the volume, as namespace/name."),
			stringColumn("StorageClass", "Storage class of the volume."),
			stringColumn("VolumeAttributesClass", "Volume attributes class of the volume."),
			stringColumn("Reason", "Why the volume is in its phase."),
			ageColumn,
			wide(stringColumn("VolumeMode", "Filesystem or Block.")),
		}, func(o *corev1.PersistentVolume) []any {
			claim := ""
			if o.Spec.ClaimRef != nil {
				claim = o.Spec.ClaimRef.Namespace + "/" + o.Spec.ClaimRef.Name
			}
			return []any{o.Name, quantityCell(o.Spec.Capacity), accessModesCell(o.Spec.AccessModes), string(o.Spec.PersistentVolumeReclaimPolicy),
				string(o.Status.Phase), claim, o.Spec.StorageClassName, orUnset(o.Spec.VolumeAttributesClassName), o.Status.Reason,
				translateAge(o.CreationTimestamp), volumeModeCell(o.Spec.VolumeMode)}
		})},
		{&corev1.PersistentVolumeClaim{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Status", "Phase of the claim."),
			stringColumn("Volume", "The volume bound to the claim."),
			stringColumn("Capacity", "Storage of the bound volume."),
			stringColumn("Access Modes", "How the volume may be mounted (RWO, ROX, RWX, RWOP)."),
			stringColumn("StorageClass", "Storage class the claim asks for."),
			stringColumn("VolumeAttributesClass", "Volume attributes class the claim asks for."),
			ageColumn,
			wide(stringColumn("VolumeMode", "Filesystem or Block.")),
		}, func(o *corev1.PersistentVolumeClaim) []any {
			capacity, modes := "", ""
			if o.Spec.VolumeName != "" {
				capacity, modes = quantityCell(o.Status.Capacity), accessModesCell(o.Status.AccessModes)
			}
			class := ""
			if o.Spec.StorageClassName != nil {
				class = *o.Spec.StorageClassName
			}
			return []any{o.Name, string(o.Status.Phase), o.Spec.VolumeName, capacity, modes, class,
				orUnset(o.Spec.VolumeAttributesClassName), translateAge(o.CreationTimestamp), volumeModeCell(o.Spec.VolumeMode)}
		})},
		{&corev1.LimitRange{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Created At", "When the limit range was created (RFC 3339)."),
		}, func(o *corev1.LimitRange) []any {
			return []any{o.Name, o.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z")}
		})},
		{&corev1.ResourceQuota{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			ageColumn,
			stringColumn("Request", "Used and hard amounts of the non-limit resources."),
			stringColumn("Limit", "Used and hard amounts of the limits.* resources."),
		}, func(o *corev1.ResourceQuota) []any {
			request, limit := quotaCells(o)
			return []any{o.Name, translateAge(o.CreationTimestamp), request, limit}
		})},
		{&eventsv1.Event{}, printerOf(eventColumns, func(o *eventsv1.Event) []any {
			// Printed as the core event it is stored as.
			var in api.Event
			var core corev1.Event
			if legacyscheme.Scheme.Convert(o, &in, nil) != nil || legacyscheme.Scheme.Convert(&in, &core, nil) != nil {
				core = corev1.Event{ObjectMeta: o.ObjectMeta, Reason: o.Reason, Type: o.Type, Message: o.Note}
			}
			return eventCells(&core)
		})},
	}
}

func quantityCell(list corev1.ResourceList) string {
	if q, ok := list[corev1.ResourceStorage]; ok {
		return q.String()
	}
	return ""
}

// accessModesCell abbreviates access modes as kubectl does.
func accessModesCell(modes []corev1.PersistentVolumeAccessMode) string {
	short := map[corev1.PersistentVolumeAccessMode]string{
		corev1.ReadWriteOnce: "RWO", corev1.ReadOnlyMany: "ROX", corev1.ReadWriteMany: "RWX", corev1.ReadWriteOncePod: "RWOP",
	}
	var out []string
	for _, m := range modes {
		if s, ok := short[m]; ok && !containsString(out, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func volumeModeCell(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return "<unset>"
	}
	return string(*m)
}

func orUnset(s *string) string {
	if s == nil || *s == "" {
		return "<unset>"
	}
	return *s
}

// quotaCells lists "resource: used/hard" pairs, limits.* apart, sorted.
func quotaCells(q *corev1.ResourceQuota) (request, limit string) {
	names := make([]string, 0, len(q.Status.Hard))
	for name := range q.Status.Hard {
		names = append(names, string(name))
	}
	sort.Strings(names)
	var requests, limits []string
	for _, name := range names {
		hard := q.Status.Hard[corev1.ResourceName(name)]
		used := q.Status.Used[corev1.ResourceName(name)]
		cell := name + ": " + used.String() + "/" + hard.String()
		if strings.HasPrefix(name, "limits.") {
			limits = append(limits, cell)
		} else {
			requests = append(requests, cell)
		}
	}
	return strings.Join(requests, ", "), strings.Join(limits, ", ")
}
