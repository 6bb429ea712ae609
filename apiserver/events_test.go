package apiserver_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// Events written through either group are read through the other: both
// are core/v1 Events in storage, as in kube-apiserver.
func TestEvents_SharedBetweenGroups(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	now := metav1.NewMicroTime(time.Now())
	_, err := cs.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "web.1"}, EventTime: now,
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"},
		Reason:    "Scheduled", Note: "assigned to node-1", Type: corev1.EventTypeNormal,
		Action: "Binding", ReportingController: "default-scheduler", ReportingInstance: "default-scheduler-1",
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := cs.CoreV1().Events("default").Get(ctx, "web.1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if core.InvolvedObject.Name != "web" || core.Message != "assigned to node-1" || core.ReportingController != "default-scheduler" {
		t.Errorf("core view of an events.k8s.io event: %+v", core)
	}

	_, err = cs.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web.2"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"},
		Reason:         "Pulled", Message: "image pulled", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "kubelet"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notes := map[string]string{}
	for _, e := range list.Items {
		notes[e.Name] = e.Note
	}
	if notes["web.1"] != "assigned to node-1" || notes["web.2"] != "image pulled" {
		t.Errorf("events.k8s.io list: %v", notes)
	}
	// Validation is the group's own: events.k8s.io requires eventTime.
	if _, err := cs.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Regarding: corev1.ObjectReference{Kind: "Pod", Name: "web", Namespace: "default"},
		Reason: "X", Type: corev1.EventTypeNormal, Action: "A", ReportingController: "c", ReportingInstance: "i",
	}, metav1.CreateOptions{}); err == nil {
		t.Error("an events.k8s.io event without eventTime was accepted")
	}
}

// Field selectors on Events are kube-apiserver's (its event strategy's
// ToSelectableFields): source is the source component or, without one,
// the reporting controller, so an events.k8s.io event is found by source
// in core/v1 (the conformance Events API test); events.k8s.io/v1 names
// the same fields its own way (regarding.*, reportingController) and has
// no source.
func TestEvents_FieldSelectors(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	if _, err := cs.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "new"}, EventTime: metav1.NewMicroTime(time.Now()),
		Regarding: corev1.ObjectReference{Namespace: "default", Kind: "Pod", Name: "web", FieldPath: "spec.containers{c}"},
		Note:      "note", Action: "Do", Reason: "Test", Type: corev1.EventTypeNormal,
		ReportingController: "test-controller", ReportingInstance: "test-node",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "old"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "db"},
		Reason:         "Pulled", Message: "image pulled", Type: corev1.EventTypeNormal,
		Source:              corev1.EventSource{Component: "kubelet"},
		ReportingController: "kubelet-controller", ReportingInstance: "n1",
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The names of the events a list holds, comma-separated.
	names := func(l runtime.Object, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		var out []string
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			out = append(out, o.(metav1.Object).GetName())
			return nil
		})
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	core := func(selector string) string {
		return names(cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: selector}))
	}
	v1 := func(selector string) string {
		return names(cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: selector}))
	}
	for _, tc := range []struct{ selector, got, want string }{
		{"source=test-controller", core("source=test-controller"), "new"},
		{"source=kubelet", core("source=kubelet"), "old"},
		{"source=kubelet-controller", core("source=kubelet-controller"), ""},
		{"reportingComponent=kubelet-controller", core("reportingComponent=kubelet-controller"), "old"},
		{"involvedObject.fieldPath=spec.containers{c}", core("involvedObject.fieldPath=spec.containers{c}"), "new"},
		{"involvedObject.kind=Pod,type=Normal", core("involvedObject.kind=Pod,type=Normal"), "new,old"},
		{"events.k8s.io reportingController=test-controller", v1("reportingController=test-controller"), "new"},
		{"events.k8s.io regarding.name=db", v1("regarding.name=db"), "old"},
		{"events.k8s.io regarding.fieldPath=spec.containers{c}", v1("regarding.fieldPath=spec.containers{c}"), "new"},
		{"events.k8s.io reason=Pulled,metadata.name=old", v1("reason=Pulled,metadata.name=old"), "old"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %s, want %q", tc.selector, tc.got, tc.want)
		}
	}
	// As kube-apiserver's field label conversions: each group takes its
	// own names only.
	for _, selector := range []string{"source=kubelet", "involvedObject.name=db"} {
		if _, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: selector}); !apierrors.IsBadRequest(err) {
			t.Errorf("events.k8s.io %s: %v, want 400", selector, err)
		}
	}
	if _, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=db"}); !apierrors.IsBadRequest(err) {
		t.Errorf("core/v1 regarding.name: %v, want 400", err)
	}
}
