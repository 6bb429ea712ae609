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
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// addedResource is one resource kube-apiserver v1.37 serves by default
// that v1.34 did not (or, for csinodes, a subresource it added).
type addedResource struct {
	gvr schema.GroupVersionResource
	// objects are manifests; the first is the one checked, the others
	// are there for the field selector to leave out.
	objects []string
	// key is the first object's storage key, storedAs the kind and
	// version it is stored in (kube-apiserver's).
	key      string
	storedAs schema.GroupVersionKind
	// status, if set, is a status the status subresource takes;
	// changeSpec changes the object's spec, which a status write must
	// not keep (nil: no status subresource).
	status     map[string]any
	changeSpec func(u *unstructured.Unstructured)
	// selector is a field selector kube-apiserver supports that matches
	// the first object only.
	selector string
	// columns are the Table's columns, as kube-apiserver prints them.
	columns []string
}

// TestBuiltin_AddedInKube137: the resources kube-apiserver v1.37.2 serves
// by default that sqlkube did not serve before it (mutating admission
// policies and bindings, cluster trust bundles, pod certificate requests,
// device taint rules, storage version migrations) and CSINodes' new
// status subresource: each takes a valid object through Kubernetes'
// strategy, is stored under kube-apiserver's key in kube-apiserver's
// storage version (decoded from the datastore), has its status written
// through the status strategy (which keeps the stored spec), is listed by
// the field selectors kube-apiserver supports (and not by others), and is
// printed with kube-apiserver's columns.
func TestBuiltin_AddedInKube137(t *testing.T) {
	cfg, etcd := newServerWithStorage(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(cfg)
	csr, bundle := stubPKCS10Request(t), caCertificatePEM(t)
	since := time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	condition := func(typ, status, reason string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": "set by the test", "lastTransitionTime": since}
	}
	pcr := func(name, pod, node string) string {
		return fmt.Sprintf(`{"apiVersion":"certificates.k8s.io/v1","kind":"PodCertificateRequest","metadata":{"name":%q,"namespace":"default"},
			"spec":{"signerName":"example.com/signer","podName":%q,"podUID":"uid-%[2]s","serviceAccountName":"default","serviceAccountUID":"uid-sa",
			"nodeName":%q,"nodeUID":"uid-%[3]s","maxExpirationSeconds":86400,"stubPKCS10Request":%q}}`, name, pod, node, csr)
	}
	ctb := func(signer, name string) string {
		return fmt.Sprintf(`{"apiVersion":"certificates.k8s.io/v1","kind":"ClusterTrustBundle","metadata":{"name":%q},
			"spec":{"signerName":%q,"trustBundle":%q}}`, strings.ReplaceAll(signer, "/", ":")+":"+name, signer, bundle)
	}
	setSpec := func(value any, path ...string) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) {
			if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []addedResource{
		{
			gvr: schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"},
			objects: []string{
				`{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"svm1"},"spec":{"resource":{"group":"","resource":"configmaps"}}}`,
				`{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"svm2"},"spec":{"resource":{"group":"apps","resource":"deployments"}}}`,
			},
			key: "/registry/storageversionmigrations/svm1", storedAs: schema.GroupVersionKind{Group: "storagemigration.k8s.io", Version: "v1beta1", Kind: "StorageVersionMigration"},
			status:     map[string]any{"resourceVersion": "5", "conditions": []any{condition("Running", "True", "Started")}},
			changeSpec: setSpec("secrets", "spec", "resource", "resource"),
			selector:   "metadata.name=svm1",
			columns:    []string{"Name", "Resource", "Status"},
		},
		{
			gvr: schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "devicetaintrules"},
			objects: []string{
				`{"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRule","metadata":{"name":"broken"},
					"spec":{"deviceSelector":{"driver":"example.com"},"taint":{"key":"example.com/broken","value":"yes","effect":"NoSchedule"}}}`,
				`{"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRule","metadata":{"name":"other"},
					"spec":{"deviceSelector":{"driver":"example.com"},"taint":{"key":"example.com/other","effect":"NoExecute"}}}`,
			},
			key: "/registry/devicetaintrules/broken", storedAs: schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1beta2", Kind: "DeviceTaintRule"},
			status:     map[string]any{"conditions": []any{condition("EvictionInProgress", "False", "NotStarted")}},
			changeSpec: setSpec("changed", "spec", "taint", "value"),
			selector:   "metadata.name=broken",
			columns:    []string{"Name", "Key", "Value", "Effect", "TimeAdded", "Age"},
		},
		{
			gvr:     schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"},
			objects: []string{pcr("pcr1", "pod1", "n1"), pcr("pcr2", "pod2", "n1"), pcr("pcr3", "pod1", "n2")},
			key:     "/registry/podcertificaterequests/default/pcr1", storedAs: schema.GroupVersionKind{Group: "certificates.k8s.io", Version: "v1beta1", Kind: "PodCertificateRequest"},
			status:     map[string]any{"conditions": []any{condition("Denied", "True", "NotAllowed")}},
			changeSpec: setSpec("pod9", "spec", "podName"),
			selector:   "spec.nodeName=n1,spec.podName=pod1,spec.signerName=example.com/signer",
			columns:    []string{"Name", "PodName", "ServiceAccountName", "NodeName", "SignerName", "State", "UnverifiedUserAnnotations"},
		},
		{
			gvr:     schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "clustertrustbundles"},
			objects: []string{ctb("example.com/a", "one"), ctb("example.com/b", "two")},
			key:     "/registry/clustertrustbundles/example.com:a:one", storedAs: schema.GroupVersionKind{Group: "certificates.k8s.io", Version: "v1beta1", Kind: "ClusterTrustBundle"},
			selector: "spec.signerName=example.com/a",
			columns:  []string{"Name", "SignerName"},
		},
		{
			gvr: schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
			objects: []string{
				`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy","metadata":{"name":"map1"},
					"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["apps"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["deployments"]}]},
					"reinvocationPolicy":"Never","mutations":[{"patchType":"JSONPatch","jsonPatch":{"expression":"[JSONPatch{op: 'add', path: '/spec/paused', value: true}]"}}]}}`,
				`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy","metadata":{"name":"map2"},
					"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["apps"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["deployments"]}]},
					"reinvocationPolicy":"Never","mutations":[{"patchType":"JSONPatch","jsonPatch":{"expression":"[JSONPatch{op: 'add', path: '/spec/paused', value: false}]"}}]}}`,
			},
			key: "/registry/mutatingadmissionpolicies/map1", storedAs: schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicy"},
			selector: "metadata.name=map1",
			columns:  []string{"Name", "Mutations", "ParamKind", "Age"},
		},
		{
			gvr: schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
			objects: []string{
				// Bound to namespaces that do not exist, so they mutate nothing.
				`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicyBinding","metadata":{"name":"mapb1"},
					"spec":{"policyName":"map1","matchResources":{"namespaceSelector":{"matchLabels":{"test":"none"}}}}}`,
				`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicyBinding","metadata":{"name":"mapb2"},
					"spec":{"policyName":"map2","matchResources":{"namespaceSelector":{"matchLabels":{"test":"none"}}}}}`,
			},
			key: "/registry/mutatingadmissionpolicybindings/mapb1", storedAs: schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicyBinding"},
			selector: "metadata.name=mapb1",
			columns:  []string{"Name", "PolicyName", "ParamRef", "Age"},
		},
		{
			gvr: schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"},
			objects: []string{
				`{"apiVersion":"storage.k8s.io/v1","kind":"CSINode","metadata":{"name":"n1"},"spec":{"drivers":[{"name":"example.com","nodeID":"n1"}]}}`,
				`{"apiVersion":"storage.k8s.io/v1","kind":"CSINode","metadata":{"name":"n2"},"spec":{"drivers":[]}}`,
			},
			key: "/registry/csinodes/n1", storedAs: schema.GroupVersionKind{Group: "storage.k8s.io", Version: "v1", Kind: "CSINode"},
			// Its status (storage health) is dropped while the alpha
			// CSIVolumeHealth gate is off, as by kube-apiserver.
			status:     map[string]any{},
			changeSpec: setSpec([]any{}, "spec", "drivers"),
			selector:   "metadata.name=n1",
			columns:    []string{"Name", "Drivers", "Age"},
		},
	} {
		t.Run(tc.gvr.Resource, func(t *testing.T) {
			var ri dynamic.ResourceInterface = dyn.Resource(tc.gvr)
			var first *unstructured.Unstructured
			for i, manifest := range tc.objects {
				obj := &unstructured.Unstructured{}
				if err := json.Unmarshal([]byte(manifest), &obj.Object); err != nil {
					t.Fatal(err)
				}
				if ns := obj.GetNamespace(); ns != "" {
					ri = dyn.Resource(tc.gvr).Namespace(ns)
				}
				created, err := ri.Create(ctx, obj, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("create %s: %v", obj.GetName(), err)
				}
				if i == 0 {
					first = created
				}
			}

			// Stored where and as kube-apiserver stores it.
			resp, err := etcd.KV.Get(ctx, tc.key)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("get %s from the datastore: %v (%d keys)", tc.key, err, len(resp.Kvs))
			}
			stored, gvk, err := legacyscheme.Codecs.UniversalDeserializer().Decode(resp.Kvs[0].Value, nil, nil)
			if err != nil {
				t.Fatalf("decode %s: %v", tc.key, err)
			}
			if *gvk != tc.storedAs {
				t.Errorf("%s is stored as %v, want %v", tc.key, *gvk, tc.storedAs)
			}
			if m, err := meta.Accessor(stored); err != nil || m.GetName() != first.GetName() || m.GetUID() != first.GetUID() {
				t.Errorf("%s holds %T %v, want %s (uid %s)", tc.key, stored, err, first.GetName(), first.GetUID())
			}

			if tc.changeSpec != nil {
				wantSpec, _, _ := unstructured.NestedFieldCopy(first.Object, "spec")
				update := first.DeepCopy()
				tc.changeSpec(update)
				update.Object["status"] = tc.status
				if _, err := ri.UpdateStatus(ctx, update, metav1.UpdateOptions{}); err != nil {
					t.Fatalf("update status: %v", err)
				}
				got, err := ri.Get(ctx, first.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for field, want := range tc.status {
					if g, _, _ := unstructured.NestedFieldNoCopy(got.Object, "status", field); !reflect.DeepEqual(g, want) {
						t.Errorf("status.%s after the status write: %v, want %v", field, g, want)
					}
				}
				if g, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec"); !reflect.DeepEqual(g, wantSpec) {
					t.Errorf("a status write changed the spec: %v, want %v", g, wantSpec)
				}
				// And a write of the object itself keeps the status.
				got.Object["status"] = map[string]any{}
				updated, err := ri.Update(ctx, got, metav1.UpdateOptions{})
				if err != nil {
					t.Fatalf("update: %v", err)
				}
				for field, want := range tc.status {
					if g, _, _ := unstructured.NestedFieldNoCopy(updated.Object, "status", field); !reflect.DeepEqual(g, want) {
						t.Errorf("status.%s after an update: %v, want %v", field, g, want)
					}
				}
			} else if _, err := ri.UpdateStatus(ctx, first, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("update status of a resource without one: %v, want 404", err)
			}

			list, err := ri.List(ctx, metav1.ListOptions{FieldSelector: tc.selector})
			if err != nil {
				t.Fatalf("list with %s: %v", tc.selector, err)
			}
			var names []string
			for _, item := range list.Items {
				names = append(names, item.GetName())
			}
			if !slices.Equal(names, []string{first.GetName()}) {
				t.Errorf("list with %s: %v, want [%s]", tc.selector, names, first.GetName())
			}
			if _, err := ri.List(ctx, metav1.ListOptions{FieldSelector: "spec.unknown=x"}); !apierrors.IsBadRequest(err) {
				t.Errorf("list with an unsupported field: %v, want 400", err)
			}

			table := &metav1.Table{}
			err = restClientFor(t, cfg, tc.gvr).Get().AbsPath(absPath(tc.gvr, first.GetNamespace())).
				SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(table)
			if err != nil || len(table.Rows) != len(tc.objects) {
				t.Fatalf("table: %v (%d rows)", err, len(table.Rows))
			}
			var columns []string
			for _, c := range table.ColumnDefinitions {
				columns = append(columns, c.Name)
			}
			if !slices.Equal(columns, tc.columns) {
				t.Errorf("table columns %v, want %v", columns, tc.columns)
			}
		})
	}
}

// stubPKCS10Request is a PKCS#10 request of a new P-256 key, base64, as
// a kubelet puts in a PodCertificateRequest.
func stubPKCS10Request(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// caCertificatePEM is a new self-signed CA certificate, PEM-encoded.
func caCertificatePEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
