package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// createFixture is one resource's object for TestCreatePaths_SameStoredObject.
type createFixture struct {
	// manifest is the object as JSON; its name and namespace are set by
	// the test. {i} stands for the path's number (1 POST, 2 apply, 3 PUT)
	// in values that must differ between the three objects. Empty: the
	// resource's entry in builtinObjects.
	manifest string
	// name is the object's name ({i} as in manifest, {path} the path's
	// name); empty: <resource>-<version>-{path}.
	name string
	// namespace of a namespaced object; empty: default.
	namespace string
	// putCreates: kube-apiserver v1.34.2's strategy for the resource
	// allows create-on-update (AllowCreateOnUpdate), so a PUT of a missing
	// object creates it (201); otherwise it is 404 NotFound.
	putCreates bool
	// derived are the fields, besides the identity every object has, that
	// the server allocates or derives from the name or uid, or that hold
	// {i}: their values are set aside, not whether they are there. Each
	// list says why.
	derived []fieldPath
	// async are the fields a controller writes after the create, at its
	// own pace: set aside whole.
	async []fieldPath
}

// fieldPath names a field of an unstructured object; "*" is every
// element of a list.
type fieldPath []string

// createPathsNamespace holds the objects that change what admission does
// to others in their namespace (a quota, limit ranges), away from
// default.
const createPathsNamespace = "create-paths-limits"

// Values the server allocates or derives from an object's name or uid.
var (
	// A Service's cluster IPs and node ports are allocated (and checked
	// in TestServices_EveryCreatePath).
	serviceAllocated = []fieldPath{{"spec", "clusterIP"}, {"spec", "clusterIPs"}, {"spec", "ports", "*", "nodePort"}}
	// A Job's generated selector names its uid, and its pod template's
	// labels its uid and name (job strategy's generateSelector); so do
	// the Job's own labels when it has none (defaulting makes them its
	// template's, the same map).
	jobDerived = []fieldPath{
		{"metadata", "labels", "batch.kubernetes.io/controller-uid"},
		{"metadata", "labels", "controller-uid"},
		{"metadata", "labels", "batch.kubernetes.io/job-name"},
		{"metadata", "labels", "job-name"},
		{"spec", "selector", "matchLabels", "batch.kubernetes.io/controller-uid"},
		{"spec", "selector", "matchLabels", "controller-uid"},
		{"spec", "template", "metadata", "labels", "batch.kubernetes.io/controller-uid"},
		{"spec", "template", "metadata", "labels", "controller-uid"},
		{"spec", "template", "metadata", "labels", "batch.kubernetes.io/job-name"},
		{"spec", "template", "metadata", "labels", "job-name"},
	}
)

// createFixtures are the resources' objects by group, version and
// resource; a resource with an entry in builtinObjects and nothing to
// add needs none here.
var createFixtures = map[schema.GroupVersionResource]createFixture{
	{Version: "v1", Resource: "namespaces"}: {
		manifest: `{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"team":"a"}}}`,
		// Defaulting labels a namespace with its name.
		derived: []fieldPath{{"metadata", "labels", "kubernetes.io/metadata.name"}},
	},
	{Version: "v1", Resource: "configmaps"}: {manifest: `{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"v"},"binaryData":{"b":"AAE="}}`},
	{Version: "v1", Resource: "secrets"}: {
		manifest: `{"apiVersion":"v1","kind":"Secret","type":"Opaque","data":{"a":"YQ=="},"stringData":{"b":"b"}}`,
	},
	{Version: "v1", Resource: "serviceaccounts"}: {manifest: `{"apiVersion":"v1","kind":"ServiceAccount","automountServiceAccountToken":false}`},
	// No ServiceAccount is needed: newServer runs without the
	// ServiceAccount admission plugin (no controller makes the accounts).
	{Version: "v1", Resource: "pods"}: {
		manifest: `{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"app":"p"}},
			"spec":{"containers":[{"name":"c","image":"busybox","command":["sleep","3600"],"ports":[{"containerPort":80}]}]}}`,
	},
	{Version: "v1", Resource: "nodes"}: {
		manifest: `{"apiVersion":"v1","kind":"Node","metadata":{"labels":{"zone":"a"}},
			"spec":{"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]}}`,
	},
	{Version: "v1", Resource: "services"}: {
		manifest: `{"apiVersion":"v1","kind":"Service",
			"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","port":80,"targetPort":8080}]}}`,
		putCreates: true,
		derived:    serviceAllocated,
	},
	{Version: "v1", Resource: "endpoints"}: {
		manifest:   `{"apiVersion":"v1","kind":"Endpoints","subsets":[{"addresses":[{"ip":"10.1.2.3"}],"ports":[{"name":"http","port":80}]}]}`,
		putCreates: true,
	},
	{Version: "v1", Resource: "events"}: {
		manifest: `{"apiVersion":"v1","kind":"Event","involvedObject":{"apiVersion":"v1","kind":"Pod","namespace":"default","name":"p"},
			"reason":"Tested","message":"hello","type":"Normal","source":{"component":"create-paths"}}`,
		putCreates: true,
	},
	{Version: "v1", Resource: "persistentvolumes"}: {
		manifest: `{"apiVersion":"v1","kind":"PersistentVolume",
			"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],"hostPath":{"path":"/tmp/pv"}}}`,
		// The strategy stamps the Pending phase with the server's clock.
		derived: []fieldPath{{"status", "lastPhaseTransitionTime"}},
	},
	{Version: "v1", Resource: "persistentvolumeclaims"}: {
		manifest: `{"apiVersion":"v1","kind":"PersistentVolumeClaim",
			"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":""}}`,
	},
	{Version: "v1", Resource: "limitranges"}: {
		manifest:   `{"apiVersion":"v1","kind":"LimitRange","spec":{"limits":[{"type":"Container","default":{"cpu":"100m"}}]}}`,
		namespace:  createPathsNamespace,
		putCreates: true,
	},
	{Version: "v1", Resource: "resourcequotas"}: {
		manifest:  `{"apiVersion":"v1","kind":"ResourceQuota","spec":{"hard":{"pods":"10"}}}`,
		namespace: createPathsNamespace,
	},
	{Group: "apps", Version: "v1", Resource: "deployments"}: {
		manifest: `{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":1,"selector":{"matchLabels":{"app":"d"}},
			"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`,
	},
	{Group: "apps", Version: "v1", Resource: "replicasets"}: {
		manifest: `{"apiVersion":"apps/v1","kind":"ReplicaSet","spec":{"replicas":1,"selector":{"matchLabels":{"app":"r"}},
			"template":{"metadata":{"labels":{"app":"r"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`,
	},
	{Group: "apps", Version: "v1", Resource: "statefulsets"}: {
		manifest: `{"apiVersion":"apps/v1","kind":"StatefulSet","spec":{"serviceName":"web","replicas":1,"selector":{"matchLabels":{"app":"s"}},
			"template":{"metadata":{"labels":{"app":"s"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`,
	},
	{Group: "apps", Version: "v1", Resource: "daemonsets"}: {
		manifest: `{"apiVersion":"apps/v1","kind":"DaemonSet","spec":{"selector":{"matchLabels":{"app":"ds"}},
			"template":{"metadata":{"labels":{"app":"ds"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`,
	},
	{Group: "apps", Version: "v1", Resource: "controllerrevisions"}: {
		manifest: `{"apiVersion":"apps/v1","kind":"ControllerRevision","data":{"spec":{"k":"v"}},"revision":1}`,
	},
	{Group: "batch", Version: "v1", Resource: "jobs"}: {
		manifest: `{"apiVersion":"batch/v1","kind":"Job","spec":{"template":{"metadata":{"labels":{"app":"j"}},
			"spec":{"containers":[{"name":"c","image":"busybox"}],"restartPolicy":"Never"}}}}`,
		derived: jobDerived,
	},
	{Group: "batch", Version: "v1", Resource: "cronjobs"}: {
		manifest: `{"apiVersion":"batch/v1","kind":"CronJob","spec":{"schedule":"*/5 * * * *",
			"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox"}],"restartPolicy":"OnFailure"}}}}}}`,
	},
	{Group: "autoscaling", Version: "v1", Resource: "horizontalpodautoscalers"}: {
		manifest: `{"apiVersion":"autoscaling/v1","kind":"HorizontalPodAutoscaler",
			"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d"},"maxReplicas":3,"targetCPUUtilizationPercentage":50}}`,
	},
	{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}: {
		manifest:   `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","spec":{"holderIdentity":"a","leaseDurationSeconds":15}}`,
		putCreates: true,
	},
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}: {
		manifest: `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","addressType":"IPv4",
			"endpoints":[{"addresses":["10.1.2.3"],"conditions":{"ready":true}}],"ports":[{"name":"http","port":80}]}`,
	},
	{Group: "events.k8s.io", Version: "v1", Resource: "events"}: {
		// The same objects as core/v1's events: a name of their own.
		name: "events-k8s-io-{path}",
		manifest: `{"apiVersion":"events.k8s.io/v1","kind":"Event","eventTime":"2026-01-02T03:04:05.000000Z",
			"reportingController":"example.com/create-paths","reportingInstance":"create-paths-1","action":"Test","reason":"Tested",
			"type":"Normal","regarding":{"apiVersion":"v1","kind":"Pod","namespace":"default","name":"p"},"note":"hello"}`,
		putCreates: true,
	},
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}: {
		manifest: `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"d"}}}}`,
	},
	{Group: "scheduling.k8s.io", Version: "v1", Resource: "priorityclasses"}: {
		manifest: `{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","value":1000,"description":"create paths"}`,
	},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}: {
		manifest:   `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`,
		putCreates: true,
	},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}: {
		manifest: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",
			"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"missing"},
			"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"alice"},{"kind":"ServiceAccount","name":"default"}]}`,
		putCreates: true,
	},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}: {
		manifest: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
			"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]},{"nonResourceURLs":["/healthz"],"verbs":["get"]}]}`,
		putCreates: true,
	},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}: {
		manifest: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
			"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"missing"},
			"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"devs"}]}`,
		putCreates: true,
	},
	{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"}: {
		manifest: `{"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment",
			"spec":{"attacher":"csi.example.com","nodeName":"n1","source":{"persistentVolumeName":"pv1"}}}`,
	},
	{Group: "storage.k8s.io", Version: "v1", Resource: "csidrivers"}: {
		manifest: `{"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver","spec":{"attachRequired":false}}`,
	},
	// An IPAddress is named by its address.
	{Group: "networking.k8s.io", Version: "v1", Resource: "ipaddresses"}: {name: "10.96.0.5{i}"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}: {
		manifest: `{"apiVersion":"networking.k8s.io/v1","kind":"ServiceCIDR","spec":{"cidrs":["10.200.{i}.0/24"]}}`,
		// Each path's range is its own ({i}).
		derived: []fieldPath{{"spec", "cidrs"}},
	},
	{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"}: {putCreates: true},
	{Group: "resource.k8s.io", Version: "v1", Resource: "devicetaintrules"}: {
		// The strategy stamps the taint with the create's time, in
		// seconds: two creates a second apart differ.
		derived: []fieldPath{{"spec", "taint", "timeAdded"}},
	},
	{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}: {
		// An APIService is named by its version and group.
		manifest: `{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService",
			"spec":{"group":"p{i}.create-paths.example.com","version":"v1","groupPriorityMinimum":100,"versionPriority":100,
			"service":{"namespace":"kube-system","name":"create-paths"},"insecureSkipTLSVerify":true}}`,
		name: "v1.p{i}.create-paths.example.com",
		// Each path's group is its own ({i}).
		derived: []fieldPath{{"spec", "group"}},
		// Written by the aggregator's availability controllers.
		async: []fieldPath{{"status", "conditions"}},
	},
	{Group: "certificates.k8s.io", Version: "v1", Resource: "certificatesigningrequests"}: {
		// {csr} is a PEM certificate request made at the start.
		manifest: `{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest",
			"spec":{"request":"{csr}","signerName":"example.com/signer","usages":["digital signature","client auth"]}}`,
	},
	{Group: "certificates.k8s.io", Version: "v1", Resource: "clustertrustbundles"}: {
		// {cabundle} is a CA certificate made at the start (a JSON
		// string); a bundle's name starts with its signer's.
		manifest: `{"apiVersion":"certificates.k8s.io/v1","kind":"ClusterTrustBundle","spec":{"signerName":"example.com/signer","trustBundle":{cabundle}}}`,
		name:     "example.com:signer:{path}",
	},
	{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}: {
		// {stubcsr} is a PKCS#10 request (DER, base64) made at the start.
		manifest: `{"apiVersion":"certificates.k8s.io/v1","kind":"PodCertificateRequest",
			"spec":{"signerName":"example.com/signer","podName":"p","podUID":"uid-p","serviceAccountName":"default","serviceAccountUID":"uid-sa",
			"nodeName":"n1","nodeUID":"uid-n1","maxExpirationSeconds":86400,"stubPKCS10Request":"{stubcsr}"}}`,
	},
	{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}: {
		// A CRD is named by its plural and group.
		manifest: `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
			"spec":{"group":"p{i}.create-paths.example.com","scope":"Namespaced","names":{"plural":"things","kind":"Thing"},
			"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object",
			"properties":{"spec":{"type":"object","properties":{"size":{"type":"integer","default":1}}}}}}}]}}`,
		name:    "things.p{i}.create-paths.example.com",
		derived: []fieldPath{{"spec", "group"}}, // each path's group is its own ({i})
		// Written by the CRD controllers (names, establishing).
		async: []fieldPath{{"status", "acceptedNames"}, {"status", "conditions"}},
	},
	// The custom resource of gadgetsCRD, created before discovery is read.
	{Group: "create-paths.example.com", Version: "v1", Resource: "gadgets"}: {
		manifest: `{"apiVersion":"create-paths.example.com/v1","kind":"Gadget","metadata":{"labels":{"app":"g"}},"spec":{"size":2}}`,
	},
}

// gadgetsCRD is a namespaced CRD with a defaulted field and a status
// subresource, so that a custom resource is created every way too.
const gadgetsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
	"metadata":{"name":"gadgets.create-paths.example.com"},
	"spec":{"group":"create-paths.example.com","scope":"Namespaced","names":{"plural":"gadgets","singular":"gadget","kind":"Gadget"},
	"versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},"schema":{"openAPIV3Schema":{"type":"object",
	"properties":{"spec":{"type":"object","properties":{"size":{"type":"integer"},"color":{"type":"string","default":"blue"}}},
	"status":{"type":"object","properties":{"ready":{"type":"boolean"}}}}}}}]}}`

// notCreatable are the served resources no object of which is ever
// stored by a create, by group and resource, with the reason.
var notCreatable = map[schema.GroupResource]string{
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:      "virtual: a create asks the authorizer and stores nothing",
	{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}: "virtual: a create asks the authorizer and stores nothing",
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}:  "virtual: a create asks the authorizer and stores nothing",
	{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:   "virtual: a create asks the authorizer and stores nothing",
	{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:       "virtual: a create answers who the caller is and stores nothing",
	{Group: "authentication.k8s.io", Resource: "tokenreviews"}:             "virtual: a create asks the authenticator and stores nothing",
	{Resource: "componentstatuses"}:                                        "computed at each get and list; never stored",
	{Resource: "bindings"}:                                                 "create-only: binds an existing pod to a node (pods/binding) and is never stored itself",
}

// createPaths are the ways an object comes into being, numbered as {i}.
var createPaths = []string{"post", "apply", "put"}

// TestCreatePaths_SameStoredObject: for every resource the server serves
// (as discovery lists it, in every version), POST, server-side apply of a
// missing object and, where the resource's strategy allows create on
// update, PUT of a missing object store the same object, identity and
// allocated or name-derived values aside; where it does not, a PUT of a
// missing object is 404 NotFound, as kube-apiserver answers.
func TestCreatePaths_SameStoredObject(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	cfg.QPS = -1 // no client-side rate limit: hundreds of requests
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	rc := cs.CoreV1().RESTClient()

	if _, err := rc.Post().AbsPath("/api/v1/namespaces").SetHeader("Content-Type", "application/json").
		Body([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + createPathsNamespace + `"}}`)).Do(ctx).Raw(); err != nil {
		t.Fatalf("namespace %s: %v", createPathsNamespace, err)
	}
	servedGadgets(t, cfg, dyn)
	caBundle, err := json.Marshal(caCertificatePEM(t))
	if err != nil {
		t.Fatal(err)
	}
	generated := strings.NewReplacer("{csr}", certificateRequest(t), "{stubcsr}", stubPKCS10Request(t), "{cabundle}", string(caBundle))

	served := servedResources(t, cfg)
	for gvr := range createFixtures {
		if _, ok := served[gvr]; !ok {
			t.Errorf("a fixture for %s, which is not served", gvr)
		}
	}
	for gvr := range builtinObjects {
		if _, ok := served[gvr]; !ok {
			t.Errorf("builtinObjects has %s, which is not served", gvr)
		}
	}
	gvrs := make([]schema.GroupVersionResource, 0, len(served))
	for gvr := range served {
		gvrs = append(gvrs, gvr)
	}
	slices.SortFunc(gvrs, func(a, b schema.GroupVersionResource) int { return strings.Compare(a.String(), b.String()) })

	var covered, putCreated []string
	for _, gvr := range gvrs {
		api := served[gvr]
		t.Run(subtestName(gvr), func(t *testing.T) {
			if reason, ok := notCreatable[gvr.GroupResource()]; ok {
				if slices.Contains(api.Verbs, "create") && slices.Contains(api.Verbs, "patch") {
					t.Fatalf("listed as not creatable (%s), but discovery lists its verbs as %v", reason, api.Verbs)
				}
				t.Skipf("not creatable: %s", reason)
			}
			if !slices.Contains(api.Verbs, "create") || !slices.Contains(api.Verbs, "patch") {
				t.Skipf("not creatable: discovery lists its verbs as %v", api.Verbs)
			}
			fx, ok := createFixtures[gvr]
			if fx.manifest == "" {
				fx.manifest = builtinObjects[gvr]
			}
			if !ok && fx.manifest == "" {
				t.Fatalf("%s is served and creatable but has no fixture: add one to createFixtures (or builtinObjects), "+
					"or list it in notCreatable with the reason", gvr)
			}
			fx.manifest = generated.Replace(fx.manifest)
			ns := ""
			if api.Namespaced {
				ns = "default"
				if fx.namespace != "" {
					ns = fx.namespace
				}
			}
			ri := dynamic.ResourceInterface(dyn.Resource(gvr))
			if ns != "" {
				ri = dyn.Resource(gvr).Namespace(ns)
			}
			collection := absPath(gvr, ns)

			var stored []*unstructured.Unstructured
			for i, path := range createPaths {
				name, body := fx.object(t, gvr, path, i+1, ns)
				code, raw, err := createVia(ctx, rc, path, collection, name, body)
				want := http.StatusCreated
				if path == "put" && !fx.putCreates {
					want = http.StatusNotFound
				}
				if want == http.StatusNotFound {
					if !apierrors.IsNotFound(err) || code != http.StatusNotFound {
						t.Fatalf("PUT of a missing object where the strategy does not create on update: %v (%d), want 404 NotFound", err, code)
					}
					if _, err := ri.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						t.Fatalf("after a refused PUT of a missing object: %v, want NotFound", err)
					}
					continue
				}
				if err != nil || code != want {
					t.Fatalf("%s of %s: %v (%d: %s), want %d", path, name, err, code, raw, want)
				}
				got, err := ri.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("get after %s: %v", path, err)
				}
				stored = append(stored, got)
			}

			want := fx.comparable(stored[0])
			for i, got := range stored[1:] {
				if diff := cmp.Diff(want, fx.comparable(got)); diff != "" {
					t.Errorf("%s of a missing object stores %s otherwise than POST (-POST +%s):\n%s",
						createPaths[i+1], got.GetName(), createPaths[i+1], diff)
				}
			}
			if t.Failed() {
				return
			}
			covered = append(covered, subtestName(gvr))
			if fx.putCreates {
				putCreated = append(putCreated, subtestName(gvr))
			}
		})
	}
	t.Logf("%d resources stored the same every way; PUT creates %d of them: %s", len(covered), len(putCreated), strings.Join(putCreated, ", "))
}

// createVia sends body, an object named name, to collection by path
// (POST, server-side apply or PUT), and returns the answer's status code
// and body.
func createVia(ctx context.Context, rc rest.Interface, path, collection, name string, body []byte) (int, []byte, error) {
	var req *rest.Request
	switch path {
	case "post":
		req = rc.Post().AbsPath(collection).SetHeader("Content-Type", "application/json")
	case "apply":
		req = rc.Patch(types.ApplyPatchType).AbsPath(collection, name).Param("fieldManager", "create-paths")
	case "put":
		req = rc.Put().AbsPath(collection, name).SetHeader("Content-Type", "application/json")
	}
	var code int
	raw, err := req.SetHeader("Accept", "application/json").Body(body).Do(ctx).StatusCode(&code).Raw()
	return code, raw, err
}

// object renders fx for one path: the object's name and its JSON.
func (fx createFixture) object(t *testing.T, gvr schema.GroupVersionResource, path string, i int, ns string) (string, []byte) {
	t.Helper()
	n := strconv.Itoa(i)
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(fx.manifest, "{i}", n)), &obj.Object); err != nil {
		t.Fatalf("fixture of %s: %v", gvr, err)
	}
	name := gvr.Resource + "-" + gvr.Version + "-{path}"
	if fx.name != "" {
		name = fx.name
	}
	name = strings.NewReplacer("{i}", n, "{path}", path).Replace(name)
	obj.SetName(name)
	obj.SetNamespace(ns)
	if ns == "" {
		unstructured.RemoveNestedField(obj.Object, "metadata", "namespace")
	}
	body, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	return name, body
}

// comparable is obj without what two creations of the same manifest
// never share: its name (each path has its own), uid, resourceVersion,
// creationTimestamp and managedFields (who wrote it, when, how), the
// values of fx.derived and the fields of fx.async. generation stays: it
// must match.
func (fx createFixture) comparable(obj *unstructured.Unstructured) map[string]any {
	out := obj.DeepCopy().Object
	for _, f := range []string{"name", "generateName", "uid", "resourceVersion", "creationTimestamp", "managedFields"} {
		unstructured.RemoveNestedField(out, "metadata", f)
	}
	for _, p := range fx.derived {
		setAside(out, p, false)
	}
	for _, p := range fx.async {
		setAside(out, p, true)
	}
	return out
}

// setAside replaces the value of the field p names in obj, in every
// element of the lists "*" stands for, with a marker, or with remove
// deletes the field.
func setAside(obj any, p fieldPath, remove bool) {
	if len(p) == 0 {
		return
	}
	switch v := obj.(type) {
	case map[string]any:
		if _, ok := v[p[0]]; ok && len(p) == 1 {
			if remove {
				delete(v, p[0])
			} else {
				v[p[0]] = "(set aside)"
			}
			return
		}
		setAside(v[p[0]], p[1:], remove)
	case []any:
		if p[0] != "*" {
			return
		}
		for _, e := range v {
			setAside(e, p[1:], remove)
		}
	}
}

// servedResources are the resources discovery lists (subresources
// aside), in every version each is served in.
func servedResources(t *testing.T, cfg *rest.Config) map[schema.GroupVersionResource]metav1.APIResource {
	t.Helper()
	_, lists, err := discovery.NewDiscoveryClientForConfigOrDie(cfg).ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	out := map[schema.GroupVersionResource]metav1.APIResource{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if !strings.Contains(r.Name, "/") {
				out[gv.WithResource(r.Name)] = r
			}
		}
	}
	if len(out) < 50 {
		t.Fatalf("discovery lists %d resources: %v", len(out), out)
	}
	return out
}

// servedGadgets creates gadgetsCRD and waits until discovery lists its
// resource.
func servedGadgets(t *testing.T, cfg *rest.Config, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(gadgetsCRD), &crd.Object); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("gadgets CRD: %v", err)
	}
	disco := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		list, err := disco.ServerResourcesForGroupVersion("create-paths.example.com/v1")
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "gadgets" }), nil
	})
	if err != nil {
		t.Fatalf("gadgets not served: %v", err)
	}
}

// certificateRequest is a new PEM certificate request, base64 as a
// CertificateSigningRequest's spec.request holds it in JSON.
func certificateRequest(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "create-paths"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// subtestName is resource.version.group, as kubectl spells it (a slash
// would nest subtests).
func subtestName(gvr schema.GroupVersionResource) string {
	return strings.TrimSuffix(fmt.Sprintf("%s.%s.%s", gvr.Resource, gvr.Version, gvr.Group), ".")
}
