package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// The metadata client (the garbage collector's, namespace deletion's)
// asks for as=PartialObjectMetadata(List): gets, lists and watches answer
// with metadata only, for built-in and custom resources, in JSON and
// protobuf.
func TestServer_PartialObjectMetadata(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	createEstablished(t, cfg, widgetCRD())
	cs := kubernetes.NewForConfigOrDie(cfg)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m1", Labels: map[string]string{"k": "v"}}, Data: map[string]string{"secret": "data"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamic.NewForConfigOrDie(cfg).Resource(widgetsGVR).Namespace("default").Create(ctx, widget("w1", map[string]any{"replicas": int64(1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What is sent is metadata only (the client above would also make do
	// with whole objects for gets and lists).
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default/configmaps").
		SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(raw); !strings.Contains(s, `"kind":"PartialObjectMetadataList"`) || strings.Contains(s, "secret") {
		t.Errorf("list as PartialObjectMetadataList: %s", s)
	}
	_, err = cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default/configmaps/m1").
		SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").DoRaw(ctx)
	if !apierrors.IsNotAcceptable(err) {
		t.Errorf("one object as a list: got %v, want 406", err)
	}
	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		gvr  schema.GroupVersionResource
		obj  string
	}{{"configmaps", configmaps, "m1"}, {"widgets", widgetsGVR, "w1"}} {
		t.Run(tc.name, func(t *testing.T) {
			md := metadata.NewForConfigOrDie(cfg).Resource(tc.gvr).Namespace("default")
			got, err := md.Get(ctx, tc.obj, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.obj || got.UID == "" || got.Labels["app"]+got.Labels["k"] == "" {
				t.Errorf("get: %+v", got)
			}
			list, err := md.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 || list.Items[0].Name != tc.obj || list.ResourceVersion == "" {
				t.Fatalf("list: %+v", list)
			}
			w, err := md.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if err := md.Delete(ctx, tc.obj, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-w.ResultChan():
				p, ok := ev.Object.(*metav1.PartialObjectMetadata)
				if ev.Type != watch.Deleted || !ok || p.Name != tc.obj {
					t.Errorf("watch event %s %T %+v", ev.Type, ev.Object, ev.Object)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no watch event")
			}
		})
	}
}
