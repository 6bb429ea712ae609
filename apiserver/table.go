package apiserver

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
)

// table converts an object or list to the Table kubectl prints: the
// columns kubectl shows for the type, rows carrying the object's metadata
// (includeObject=Metadata, the default), the whole object (Object) or
// nothing (None).
func (h *handler) table(obj runtime.Object, _ negotiation.MediaTypeOptions) (*metav1.Table, error) {
	include := metav1.IncludeMetadata
	if v := h.c.QueryParam("includeObject"); v != "" {
		include = metav1.IncludeObjectPolicy(v)
	}
	t := &metav1.Table{ColumnDefinitions: h.columns()}
	items := []runtime.Object{obj}
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, err
		}
		if lm, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion, t.Continue, t.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
		}
	} else if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	for _, item := range items {
		row := metav1.TableRow{Cells: h.cells(item)}
		switch include {
		case metav1.IncludeObject:
			row.Object.Object = item
		case metav1.IncludeMetadata:
			m, err := meta.Accessor(item)
			if err != nil {
				return nil, err
			}
			partial := &metav1.PartialObjectMetadata{ObjectMeta: *metaOf(m)}
			partial.APIVersion, partial.Kind = metav1.SchemeGroupVersion.String(), "PartialObjectMetadata"
			row.Object.Object = partial
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

func metaOf(m metav1.Object) *metav1.ObjectMeta {
	if om, ok := m.(*metav1.ObjectMeta); ok {
		return om.DeepCopy()
	}
	return &metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		Generation: m.GetGeneration(), CreationTimestamp: m.GetCreationTimestamp(), DeletionTimestamp: m.GetDeletionTimestamp(),
		Labels: m.GetLabels(), Annotations: m.GetAnnotations(), OwnerReferences: m.GetOwnerReferences(), Finalizers: m.GetFinalizers(),
	}
}

var (
	nameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."}
	ageColumn  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "Time since the object was created."}
)

func (h *handler) columns() []metav1.TableColumnDefinition {
	switch h.r.GVK.Kind {
	case "Pod":
		return []metav1.TableColumnDefinition{nameColumn,
			{Name: "Ready", Type: "string", Description: "Ready containers of all containers."},
			{Name: "Status", Type: "string", Description: "The pod's phase or the reason it is not running."},
			{Name: "Restarts", Type: "string", Description: "Container restarts."},
			ageColumn,
			{Name: "IP", Type: "string", Priority: 1, Description: "The pod's IP address."},
			{Name: "Node", Type: "string", Priority: 1, Description: "The node the pod is bound to."},
		}
	case "Namespace":
		return []metav1.TableColumnDefinition{nameColumn, {Name: "Status", Type: "string", Description: "The namespace's phase."}, ageColumn}
	case "ConfigMap":
		return []metav1.TableColumnDefinition{nameColumn, {Name: "Data", Type: "string", Description: "Number of keys."}, ageColumn}
	case "Secret":
		return []metav1.TableColumnDefinition{nameColumn, {Name: "Type", Type: "string"}, {Name: "Data", Type: "string"}, ageColumn}
	}
	return []metav1.TableColumnDefinition{nameColumn, ageColumn}
}

func (h *handler) cells(obj runtime.Object) []any {
	m, _ := meta.Accessor(obj)
	age := translateAge(m.GetCreationTimestamp())
	switch o := obj.(type) {
	case *corev1.Pod:
		ready, restarts := 0, int32(0)
		for _, cs := range o.Status.ContainerStatuses {
			if cs.Ready {
				ready++
			}
			restarts += cs.RestartCount
		}
		status := string(o.Status.Phase)
		if o.Status.Reason != "" {
			status = o.Status.Reason
		}
		if status == "" {
			status = "Pending"
		}
		if o.DeletionTimestamp != nil {
			status = "Terminating"
		}
		ip, node := "<none>", "<none>"
		if o.Status.PodIP != "" {
			ip = o.Status.PodIP
		}
		if o.Spec.NodeName != "" {
			node = o.Spec.NodeName
		}
		return []any{o.Name, fmt.Sprintf("%d/%d", ready, len(o.Spec.Containers)), status, strconv.Itoa(int(restarts)), age, ip, node}
	case *corev1.Namespace:
		phase := string(o.Status.Phase)
		if phase == "" {
			phase = string(corev1.NamespaceActive)
		}
		return []any{o.Name, phase, age}
	case *corev1.ConfigMap:
		return []any{o.Name, int64(len(o.Data) + len(o.BinaryData)), age}
	case *corev1.Secret:
		return []any{o.Name, string(o.Type), int64(len(o.Data)), age}
	}
	return []any{m.GetName(), age}
}

func translateAge(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}
