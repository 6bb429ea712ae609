package registry

import (
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/apiserver/openapi"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
)

// BenchmarkFieldManager_Update is the managedFields tracking of the two
// writes simulated nodes make most (a node Lease renewal, a pod's status
// going Running), over the OpenAPI type converter the server uses, with
// and without SkipManagedFields:
//
//	go test ./apiserver/registry -run '^$' -bench FieldManager -count 6
func BenchmarkFieldManager_Update(b *testing.B) {
	builder, err := openapi.NewBuilder([]openapi.Resource{
		{GVK: coordinationv1.SchemeGroupVersion.WithKind("Lease"), Plural: "leases", Namespaced: true, Verbs: []string{"get", "update"}, Object: &coordinationv1.Lease{}},
		{GVK: corev1.SchemeGroupVersion.WithKind("Pod"), Plural: "pods", Namespaced: true, Verbs: []string{"get", "update"}, Object: &corev1.Pod{},
			Subresources: []openapi.Subresource{{Name: "status", Verbs: []string{"get", "update"}}}},
	}, openapi.Info{Title: "bench", Version: "v1.34.2"})
	if err != nil {
		b.Fatal(err)
	}
	tc, err := managedfields.NewTypeConverter(builder.Definitions(), false)
	if err != nil {
		b.Fatal(err)
	}
	converters := []struct {
		name string
		tc   managedfields.TypeConverter
	}{{"upstream", tc}, {"skip-managedfields", SkipManagedFields(tc)}}

	for _, w := range []struct {
		name        string
		gvk         schema.GroupVersionKind
		subresource string
		live, next  func() runtime.Object
	}{
		{"lease-renewal", coordinationv1.SchemeGroupVersion.WithKind("Lease"), "",
			func() runtime.Object { return benchLease(100) }, func() runtime.Object { return benchLease(110) }},
		{"pod-status-running", corev1.SchemeGroupVersion.WithKind("Pod"), "status",
			func() runtime.Object { return benchPodPending() }, func() runtime.Object { return benchPodRunning() }},
	} {
		for _, c := range converters {
			b.Run(w.name+"/"+c.name, func(b *testing.B) {
				s := clientgoscheme.Scheme
				fm, err := managedfields.NewDefaultFieldManager(c.tc, s, s, s, w.gvk, w.gvk.GroupVersion(), w.subresource, nil)
				if err != nil {
					b.Fatal(err)
				}
				live := w.live()
				if len(managedFieldsOf(b, live)) == 0 {
					b.Fatal("the live object should carry managedFields")
				}
				b.ReportAllocs()
				for b.Loop() {
					out, err := fm.Update(live, w.next(), "sqlkube")
					if err != nil {
						b.Fatal(err)
					}
					if len(managedFieldsOf(b, out)) == 0 {
						b.Fatal("no managedFields tracked")
					}
				}
			})
		}
	}
}

func managedFieldsOf(b *testing.B, obj runtime.Object) []metav1.ManagedFieldsEntry {
	b.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		b.Fatal(err)
	}
	return acc.GetManagedFields()
}

func fieldsV1(s string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(s)} }

// benchLease is a node Lease as a kubelet keeps it, renewed at second t.
func benchLease(t int64) *coordinationv1.Lease {
	at := metav1.NewTime(time.Unix(0, 0))
	return &coordinationv1.Lease{
		TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "fake-1", Namespace: "kube-node-lease", ResourceVersion: "5", UID: "u1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "fake-1", UID: "n1"}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "sqlkube", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1", Time: &at, FieldsType: "FieldsV1",
				FieldsV1: fieldsV1(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"n1\"}":{}}},"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`),
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("fake-1"), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Unix(t, 0)},
		},
	}
}

func benchPodPending() *corev1.Pod {
	at := metav1.NewTime(time.Unix(0, 0))
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "p-1", Namespace: "default", ResourceVersion: "7", UID: "u2", Labels: map[string]string{"app": "bench"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1",
				FieldsV1: fieldsV1(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{".":{},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:nodeName":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}`),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: "fake-1", RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst,
			SchedulerName: "default-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](30), EnableServiceLinks: ptr.To(true),
			SecurityContext: &corev1.PodSecurityContext{},
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/app:1.0", ImagePullPolicy: corev1.PullIfNotPresent,
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: apiresource.MustParse("100m"), corev1.ResourceMemory: apiresource.MustParse("64Mi"),
				}},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable},
	}
}

func benchPodRunning() *corev1.Pod {
	p := benchPodPending()
	at := metav1.NewTime(time.Unix(200, 0))
	p.ManagedFields = nil
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable, HostIP: "10.0.0.1", PodIP: "10.244.0.5",
		HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}}, PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}}, StartTime: &at,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: "registry.example/app:1.0", ImageID: "fake", ContainerID: "fake://p-1/app", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}},
		}},
	}
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: at})
	}
	return p
}
