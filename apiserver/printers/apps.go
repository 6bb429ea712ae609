package printers

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Printers of the apps/v1 kinds.

var (
	containersColumn = wide(stringColumn("Containers", "Names of the containers in the pod template."))
	imagesColumn     = wide(stringColumn("Images", "Images of the containers in the pod template."))
	selectorColumn   = wide(stringColumn("Selector", "Label selector of the pods the object manages."))
)

func appsPrinters() []printerEntry {
	return []printerEntry{
		{&appsv1.Deployment{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Ready", "Ready pods of the desired number."),
			integerColumn("Up-to-date", "Pods running the latest pod template."),
			integerColumn("Available", "Pods ready for at least minReadySeconds."),
			ageColumn, containersColumn, imagesColumn, selectorColumn,
		}, func(o *appsv1.Deployment) []any {
			names, images := containerCells(o.Spec.Template.Spec.Containers)
			selector := ""
			if sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector); err == nil {
				selector = sel.String()
			}
			return []any{
				o.Name, fmt.Sprintf("%d/%d", o.Status.ReadyReplicas, int32Or(o.Spec.Replicas, 1)),
				int64(o.Status.UpdatedReplicas), int64(o.Status.AvailableReplicas), translateAge(o.CreationTimestamp),
				names, images, selector,
			}
		})},
		{&appsv1.ReplicaSet{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			integerColumn("Desired", "Number of pods wanted."),
			integerColumn("Current", "Number of pods there are."),
			integerColumn("Ready", "Number of pods that are ready."),
			ageColumn, containersColumn, imagesColumn, selectorColumn,
		}, func(o *appsv1.ReplicaSet) []any {
			names, images := containerCells(o.Spec.Template.Spec.Containers)
			return []any{
				o.Name, int64(int32Or(o.Spec.Replicas, 1)), int64(o.Status.Replicas), int64(o.Status.ReadyReplicas),
				translateAge(o.CreationTimestamp), names, images, labelSelectorCell(o.Spec.Selector),
			}
		})},
		{&appsv1.StatefulSet{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Ready", "Ready pods of the desired number."),
			ageColumn, containersColumn, imagesColumn,
		}, func(o *appsv1.StatefulSet) []any {
			names, images := containerCells(o.Spec.Template.Spec.Containers)
			return []any{
				o.Name, fmt.Sprintf("%d/%d", o.Status.ReadyReplicas, int32Or(o.Spec.Replicas, 1)),
				translateAge(o.CreationTimestamp), names, images,
			}
		})},
		{&appsv1.DaemonSet{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			integerColumn("Desired", "Nodes that should run the daemon pod."),
			integerColumn("Current", "Nodes running at least one daemon pod."),
			integerColumn("Ready", "Nodes whose daemon pod is ready."),
			integerColumn("Up-to-date", "Nodes running the latest pod template."),
			integerColumn("Available", "Nodes whose daemon pod is available."),
			stringColumn("Node Selector", "Node labels the daemon pods are restricted to."),
			ageColumn, containersColumn, imagesColumn, selectorColumn,
		}, func(o *appsv1.DaemonSet) []any {
			s := o.Status
			names, images := containerCells(o.Spec.Template.Spec.Containers)
			return []any{
				o.Name, int64(s.DesiredNumberScheduled), int64(s.CurrentNumberScheduled), int64(s.NumberReady),
				int64(s.UpdatedNumberScheduled), int64(s.NumberAvailable), labels.FormatLabels(o.Spec.Template.Spec.NodeSelector),
				translateAge(o.CreationTimestamp), names, images, labelSelectorCell(o.Spec.Selector),
			}
		})},
		{&appsv1.ControllerRevision{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Controller", "The controller owning the revision, as kind.group/name."),
			integerColumn("Revision", "Revision number of the state recorded."),
			ageColumn,
		}, func(o *appsv1.ControllerRevision) []any {
			controller := cellNone
			if ref := metav1.GetControllerOf(o); ref != nil {
				controller = ref.Name
				if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil {
					if gk := gv.WithKind(ref.Kind).GroupKind(); !gk.Empty() {
						controller = strings.ToLower(gk.String()) + "/" + ref.Name
					}
				}
			}
			return []any{o.Name, controller, o.Revision, translateAge(o.CreationTimestamp)}
		})},
	}
}
