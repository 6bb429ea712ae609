package apiserver_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
