package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	authenticationv1beta1 "k8s.io/api/authentication/v1beta1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// builtinObjects are one valid object of each resource added for the
// controllers and the scheduler, by resource.
var builtinObjects = map[schema.GroupVersionResource]string{
	{Version: "v1", Resource: "replicationcontrollers"}: `{"apiVersion":"v1","kind":"ReplicationController","metadata":{"name":"rc1","namespace":"default"},
		"spec":{"replicas":2,"selector":{"app":"a"},"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`,
	{Version: "v1", Resource: "podtemplates"}: `{"apiVersion":"v1","kind":"PodTemplate","metadata":{"name":"pt1","namespace":"default"},
		"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}`,
	{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}: `{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"fast"},"provisioner":"example.com/fast"}`,
	{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"}:       `{"apiVersion":"storage.k8s.io/v1","kind":"CSINode","metadata":{"name":"n1"},"spec":{"drivers":[]}}`,
	{Group: "storage.k8s.io", Version: "v1", Resource: "csistoragecapacities"}: `{"apiVersion":"storage.k8s.io/v1","kind":"CSIStorageCapacity","metadata":{"name":"cap1","namespace":"default"},
		"storageClassName":"fast","capacity":"1Gi"}`,
	{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattributesclasses"}: `{"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttributesClass","metadata":{"name":"gold"},"driverName":"example.com/csi","parameters":{"iops":"100"}}`,
	{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}: `{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"h1","namespace":"default"},
		"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d"},"maxReplicas":3}}`,
	{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}: `{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"gpu"},"spec":{}}`,
	{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}: `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"claim1","namespace":"default"},
		"spec":{"devices":{"requests":[{"name":"r","exactly":{"deviceClassName":"gpu"}}]}}}`,
	{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"}: `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"tmpl1","namespace":"default"},
		"spec":{"spec":{"devices":{"requests":[{"name":"r","exactly":{"deviceClassName":"gpu"}}]}}}}`,
	{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}: `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"slice1"},
		"spec":{"driver":"example.com","nodeName":"n1","pool":{"name":"p","resourceSliceCount":1,"generation":1},"devices":[{"name":"d0"}]}}`,
	{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}: `{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"ing1","namespace":"default"},
		"spec":{"defaultBackend":{"service":{"name":"web","port":{"number":80}}}}}`,
	{Group: "networking.k8s.io", Version: "v1", Resource: "ingressclasses"}:  `{"apiVersion":"networking.k8s.io/v1","kind":"IngressClass","metadata":{"name":"nginx"},"spec":{"controller":"example.com/ingress"}}`,
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}: `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"deny","namespace":"default"},"spec":{"podSelector":{}}}`,
	{Group: "networking.k8s.io", Version: "v1", Resource: "ipaddresses"}: `{"apiVersion":"networking.k8s.io/v1","kind":"IPAddress","metadata":{"name":"10.96.0.50"},
		"spec":{"parentRef":{"group":"","resource":"services","namespace":"default","name":"web"}}}`,
	{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}: `{"apiVersion":"networking.k8s.io/v1","kind":"ServiceCIDR","metadata":{"name":"extra"},"spec":{"cidrs":["10.200.0.0/24"]}}`,
	{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"}:     `{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"gvisor"},"handler":"runsc"}`,
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}: `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"vw"},
		"webhooks":[{"name":"v.example.com","clientConfig":{"url":"https://example.com/v"},"sideEffects":"None","admissionReviewVersions":["v1"]}]}`,
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}: `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingWebhookConfiguration","metadata":{"name":"mw"},
		"webhooks":[{"name":"m.example.com","clientConfig":{"url":"https://example.com/m"},"sideEffects":"None","admissionReviewVersions":["v1"]}]}`,
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}: `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"name":"vap"},
		"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["apps"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["deployments"]}]},
		"validations":[{"expression":"object.spec.replicas <= 5"}]}}`,
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}: `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyBinding","metadata":{"name":"vapb"},
		"spec":{"policyName":"vap","validationActions":["Deny"]}}`,
	// A mutating policy and binding that match no object (no object
	// carries the label, no namespace the binding's), so they mutate
	// nothing the tests create.
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}: `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy","metadata":{"name":"map"},
		"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["apps"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["deployments"]}],
		"objectSelector":{"matchLabels":{"sqlkube-test":"never"}}},"reinvocationPolicy":"Never",
		"mutations":[{"patchType":"JSONPatch","jsonPatch":{"expression":"[JSONPatch{op: 'add', path: '/spec/paused', value: true}]"}}]}}`,
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"}: `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicyBinding","metadata":{"name":"mapb"},
		"spec":{"policyName":"map","matchResources":{"namespaceSelector":{"matchLabels":{"sqlkube-test":"never"}}}}}`,
	{Group: "resource.k8s.io", Version: "v1", Resource: "devicetaintrules"}: `{"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRule","metadata":{"name":"broken"},
		"spec":{"deviceSelector":{"driver":"example.com"},"taint":{"key":"example.com/broken","effect":"NoSchedule"}}}`,
	{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"}: `{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"svm"},
		"spec":{"resource":{"group":"","resource":"configmaps"}}}`,
	{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}: `{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1beta1.metrics.k8s.io"},
		"spec":{"group":"metrics.k8s.io","version":"v1beta1","groupPriorityMinimum":100,"versionPriority":100,"service":{"namespace":"kube-system","name":"metrics-server"},"insecureSkipTLSVerify":true}}`,
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "prioritylevelconfigurations"}: `{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"PriorityLevelConfiguration","metadata":{"name":"pl"},
		"spec":{"type":"Limited","limited":{"limitResponse":{"type":"Reject"}}}}`,
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas"}: `{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"FlowSchema","metadata":{"name":"fs"},
		"spec":{"priorityLevelConfiguration":{"name":"pl"},"rules":[{"subjects":[{"kind":"Group","group":{"name":"devs"}}],"resourceRules":[{"verbs":["*"],"apiGroups":["*"],"resources":["*"],"namespaces":["*"]}]}]}}`,
}

// TestBuiltin_CreateGetListTable: each added resource takes a valid
// object (Kubernetes' strategy defaults and validates it), reads it back,
// lists it, prints it as a Table, and refuses an invalid one with 422.
func TestBuiltin_CreateGetListTable(t *testing.T) {
	cfg := newServer(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(cfg)
	for gvr, manifest := range builtinObjects {
		t.Run(gvr.Resource, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			if err := json.Unmarshal([]byte(manifest), &obj.Object); err != nil {
				t.Fatal(err)
			}
			ri := dynamic.ResourceInterface(dyn.Resource(gvr))
			if ns := obj.GetNamespace(); ns != "" {
				ri = dyn.Resource(gvr).Namespace(ns)
			}
			created, err := ri.Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if created.GetUID() == "" || created.GetResourceVersion() == "" {
				t.Errorf("created without uid or resourceVersion: %v", created.Object["metadata"])
			}
			if _, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); err != nil {
				t.Fatalf("get: %v", err)
			}
			list, err := ri.List(ctx, metav1.ListOptions{})
			if err != nil || len(list.Items) == 0 {
				t.Fatalf("list: %v (%d items)", err, len(list.Items))
			}
			table := &metav1.Table{}
			err = rest.Interface(restClientFor(t, cfg, gvr)).Get().AbsPath(absPath(gvr, obj.GetNamespace())).
				SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(table)
			// (Upstream's IPAddress printer gives a cell more than it has
			// columns; kube-apiserver serves the same.)
			if err != nil || len(table.Rows) == 0 || len(table.ColumnDefinitions) < 2 || len(table.Rows[0].Cells) < len(table.ColumnDefinitions) {
				t.Fatalf("table: %v %+v", err, table)
			}
			bad := obj.DeepCopy()
			bad.SetName("Not_Valid")
			if _, err := ri.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
				t.Errorf("create with an invalid name: %v, want 422", err)
			}
		})
	}
}

func restClientFor(t *testing.T, cfg *rest.Config, gvr schema.GroupVersionResource) rest.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient()
}

func absPath(gvr schema.GroupVersionResource, ns string) string {
	p := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		p = "/api/" + gvr.Version
	}
	if ns != "" {
		p += "/namespaces/" + ns
	}
	return p + "/" + gvr.Resource
}

// TestBuiltin_ServedSpecially: replication controllers' scale,
// autoscaling/v1 over autoscaling/v2's objects, component statuses (get
// and list only), the default ServiceCIDR and flow control objects, and
// whoami in v1beta1.
func TestBuiltin_ServedSpecially(t *testing.T) {
	cfg := newServer(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "replicationcontrollers"},
		{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"},
	} {
		obj := &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(builtinObjects[gvr]), &obj.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := cs.CoreV1().ReplicationControllers("default").GetScale(ctx, "rc1", metav1.GetOptions{})
	if err != nil || sc.Spec.Replicas != 2 || sc.Status.Selector != "app=a" {
		t.Fatalf("rc scale: %+v %v", sc, err)
	}
	sc.Spec.Replicas = 5
	if _, err := cs.CoreV1().ReplicationControllers("default").UpdateScale(ctx, "rc1", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rc, err := cs.CoreV1().ReplicationControllers("default").Get(ctx, "rc1", metav1.GetOptions{}); err != nil || *rc.Spec.Replicas != 5 {
		t.Fatalf("rc after scaling: %v", err)
	}
	// The v2 object read as v1: the CPU target is carried over.
	hpa, err := cs.AutoscalingV1().HorizontalPodAutoscalers("default").Get(ctx, "h1", metav1.GetOptions{})
	if err != nil || hpa.Spec.MaxReplicas != 3 || hpa.Spec.ScaleTargetRef.Name != "d" {
		t.Fatalf("hpa as v1: %+v %v", hpa, err)
	}
	if _, err := cs.AutoscalingV1().HorizontalPodAutoscalers("default").Create(ctx, &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "h2"},
		Spec:       autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d"}, MaxReplicas: 4},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if h, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "h2", metav1.GetOptions{}); err != nil || h.Spec.MaxReplicas != 4 || len(h.Spec.Metrics) != 1 {
		t.Fatalf("v1 hpa read as v2 (with the defaulted CPU metric): %+v %v", h, err)
	}
	list, err := cs.CoreV1().ComponentStatuses().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "etcd-0" || list.Items[0].Conditions[0].Status != "True" {
		t.Fatalf("componentstatuses: %+v %v", list, err)
	}
	if _, err := cs.CoreV1().ComponentStatuses().Get(ctx, "etcd-0", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ComponentStatuses().Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get of a missing component: %v, want 404", err)
	}
	if err := cs.CoreV1().ComponentStatuses().Delete(ctx, "etcd-0", metav1.DeleteOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("delete of a component status: %v, want 405", err)
	}
	cidr, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || strings.Join(cidr.Spec.CIDRs, ",") != "10.96.0.0/12" || !meta.IsStatusConditionTrue(cidr.Status.Conditions, networkingv1.ServiceCIDRConditionReady) {
		t.Fatalf("default ServiceCIDR: %+v %v", cidr, err)
	}
	// kube-apiserver's default flow control configuration.
	for _, name := range []string{"exempt", "catch-all", "system-nodes", "global-default"} {
		fs, err := cs.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(fs.Status.Conditions) != 1 || fs.Status.Conditions[0].Status != "False" {
			t.Errorf("flow schema %s: %+v %v", name, fs, err)
		}
	}
	if pl, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "workload-low", metav1.GetOptions{}); err != nil || pl.Spec.Limited == nil {
		t.Errorf("priority level workload-low: %+v %v", pl, err)
	}
	ssr, err := cs.AuthenticationV1beta1().SelfSubjectReviews().Create(ctx, &authenticationv1beta1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || ssr.Status.UserInfo.Username != "system:unsecured" {
		t.Fatalf("whoami in v1beta1: %+v %v", ssr, err)
	}
}

// TestBuiltin_StoredAsKubeAPIServer: objects are stored under the keys and
// in the versions and encodings kube-apiserver v1.37.2 uses (checked
// against one: it and sqlkube read each other's objects), so either may
// serve a database the other wrote.
func TestBuiltin_StoredAsKubeAPIServer(t *testing.T) {
	cfg, etcd := newServerWithStorage(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, tc := range []struct {
		gvr      schema.GroupVersionResource
		key      string
		contains string // the stored apiVersion (protobuf) or JSON's start
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "replicationcontrollers"}, "/registry/controllers/default/rc1", "\x0a\x02v1"},
		{schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}, "/registry/ingress/default/ing1", "networking.k8s.io/v1"},
		{schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattributesclasses"}, "/registry/volumeattributesclasses/gold", "storage.k8s.io/v1"},
		{schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}, "/registry/horizontalpodautoscalers/default/h1", "autoscaling/v2"},
		{schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}, "/registry/deviceclasses/gpu", "resource.k8s.io/v1"},
		{schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}, "/registry/resourceclaims/default/claim1", "resource.k8s.io/v1"},
		{schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}, "/registry/apiregistration.k8s.io/apiservices/v1beta1.metrics.k8s.io",
			`{"kind":"APIService","apiVersion":"apiregistration.k8s.io/v1"`},
	} {
		t.Run(tc.gvr.Resource, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			if err := json.Unmarshal([]byte(builtinObjects[tc.gvr]), &obj.Object); err != nil {
				t.Fatal(err)
			}
			ri := dynamic.ResourceInterface(dyn.Resource(tc.gvr))
			if ns := obj.GetNamespace(); ns != "" {
				ri = dyn.Resource(tc.gvr).Namespace(ns)
			}
			if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			resp, err := etcd.KV.Get(ctx, tc.key)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("get %s: %v (%d keys)", tc.key, err, len(resp.Kvs))
			}
			if v := string(resp.Kvs[0].Value); !strings.Contains(v, tc.contains) {
				t.Errorf("%s holds %q, want %q in it", tc.key, v[:min(len(v), 80)], tc.contains)
			}
		})
	}
}
