package registry

import (
	"fmt"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/event"
)

// eventFields are the fields a selector may name on an Event of either
// group: Kubernetes' own (event.ToSelectableFields on the internal Event,
// so "source" is the reporting controller when the event has no source
// component, as for events written through events.k8s.io/v1).
func eventFields(obj runtime.Object) fields.Set {
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return nil // an Event always converts; nothing matches if not
	}
	return event.ToSelectableFields(in.(*api.Event))
}

// eventsV1FieldLabels are the field labels events.k8s.io/v1 accepts
// (k8s.io/kubernetes/pkg/apis/events/v1 AddFieldLabelConversionsForEvent),
// each the core field label it stands for, which Kubernetes' conversion
// names (eventsV1FieldLabel).
var eventsV1FieldLabels = eventsV1FieldLabel(
	"reason", "type", "reportingController",
	"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
	"regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath",
)

func eventsV1FieldLabel(labels ...string) map[string]string {
	out := map[string]string{}
	gvk := eventsv1.SchemeGroupVersion.WithKind("Event")
	for _, label := range labels {
		core, _, err := legacyscheme.Scheme.ConvertFieldLabel(gvk, label, "")
		if err != nil {
			panic(fmt.Sprintf("events.k8s.io/v1 field label %s: %v", label, err))
		}
		out[label] = core
	}
	return out
}

// eventsV1Fields are eventFields under events.k8s.io/v1's labels: a
// selector on regarding.name matches what involvedObject.name does in
// core/v1 (kube-apiserver converts the label, then matches the same
// fields).
func eventsV1Fields(obj runtime.Object) fields.Set {
	core := eventFields(obj)
	out := fields.Set{}
	for label, coreLabel := range eventsV1FieldLabels {
		out[label] = core[coreLabel]
	}
	return out
}
