// Package tenant hosts many Kubernetes control planes in one process: a
// tenant is a whole cluster (identity, API endpoint, controllers,
// scheduler, data) that a provider manages through the host's own API,
// as Tenant objects (tenants.sqlkube.io/v1alpha1).
package tenant

import (
	"fmt"
	"regexp"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The Tenant resource.
const (
	Group    = "sqlkube.io"
	Version  = "v1alpha1"
	Kind     = "Tenant"
	Resource = "tenants"
)

// GVR is the Tenant resource's group, version and resource.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// Namespace holds the host's Secrets of its tenants: <name>-token (the
// tenant's cluster token, which opens its identity in its datastore) and
// <name>-kubeconfig (its admin kubeconfig, key "kubeconfig").
const Namespace = "sqlkube-tenants"

// Finalizer keeps a deleted Tenant until its data, role and Secrets are
// gone.
const Finalizer = "sqlkube.io/tenant"

// Phases of a Tenant.
const (
	PhasePending   = "Pending"   // accepted, not yet serving
	PhaseReady     = "Ready"     // serving at Status.Endpoint
	PhaseSuspended = "Suspended" // data kept, nothing running; woken by a request
	PhaseDeleting  = "Deleting"
	PhaseFailed    = "Failed" // Status.Message says why
)

// Tenant is one hosted cluster.
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec,omitempty"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what the provider asks for.
type Spec struct {
	// Version is the Kubernetes version the tenant runs ("": the host's;
	// a tenant runs the version of the host's binary, and is upgraded
	// with it).
	Version string `json:"version,omitempty"`
	// Datastore places the tenant's data ("": the host's default).
	Datastore string `json:"datastore,omitempty"`
	// Quota is the tenant's datastore quota (etcd's
	// --quota-backend-bytes; empty: the host's default).
	Quota *resource.Quantity `json:"quota,omitempty"`
	// Suspended frees the tenant's memory and connections; its data is
	// kept, and a request to its endpoint resumes it.
	Suspended bool `json:"suspended,omitempty"`
}

// Status is what the host reports.
type Status struct {
	Phase   string `json:"phase,omitempty"`
	Message string `json:"message,omitempty"`
	// Port is the tenant's API port, from the host's range; Endpoint its
	// URL.
	Port     int    `json:"port,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	// KubeconfigSecret names the Secret (in Namespace) holding the admin
	// kubeconfig, key "kubeconfig".
	KubeconfigSecret string `json:"kubeconfigSecret,omitempty"`
	// Datastore is where the data is ("" until placed).
	Datastore string `json:"datastore,omitempty"`
	// QuotaBytes is the datastore quota the host applied last, in bytes
	// (spec.quota, or the host's default; negative: none). A change of
	// it clears a NOSPACE alarm when the datastore is under the new
	// quota (applyQuota).
	QuotaBytes int64 `json:"quotaBytes,omitempty"`
	// ObservedGeneration is the Spec generation the status is about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// FromUnstructured decodes a Tenant.
func FromUnstructured(u *unstructured.Unstructured) (*Tenant, error) {
	t := &Tenant{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return nil, fmt.Errorf("tenant %s: %w", u.GetName(), err)
	}
	return t, nil
}

// ToUnstructured encodes a Tenant.
func ToUnstructured(t *Tenant) (*unstructured.Unstructured, error) {
	t.APIVersion, t.Kind = Group+"/"+Version, Kind
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// nameRE is what a tenant may be called: a DNS label short enough to
// prefix its Secrets and, on PostgreSQL, its schema and role.
var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$`)

// ValidName reports why name cannot be a tenant's ("" when it can).
func ValidName(name string) string {
	if !nameRE.MatchString(name) {
		return "a tenant's name is a lowercase DNS label of at most 40 characters that starts with a letter"
	}
	return ""
}

// CRD is the Tenant CustomResourceDefinition the host installs.
func CRD() *apiextensionsv1.CustomResourceDefinition {
	str := func(desc string) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Type: "string", Description: desc}
	}
	yes := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: Resource + "." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: Resource, Singular: "tenant", Kind: Kind, ListKind: Kind + "List", ShortNames: []string{"tnt"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
					{Name: "Endpoint", Type: "string", JSONPath: ".status.endpoint"},
					{Name: "Suspended", Type: "boolean", JSONPath: ".spec.suspended"},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"},
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"version":   str("Kubernetes version (empty: the host's)"),
							"datastore": str("where the tenant's data is kept (empty: the host's default)"),
							"quota": {XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
								Pattern:     `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`,
								Description: "datastore quota in bytes (empty: the host's default)"},
							"suspended": {Type: "boolean", Description: "suspend: memory and connections freed, data kept"},
						}},
						"status": {Type: "object", XPreserveUnknownFields: &yes},
					},
				}},
			}},
		},
	}
}
