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
	// PhaseMoving: stopped while its data is copied to the datastore
	// spec.datastore names (Lifecycle: move).
	PhaseMoving = "Moving"
	// PhaseRestoring: its datastore is being filled from
	// spec.restoreFrom, before it first starts.
	PhaseRestoring = "Restoring"
)

// Conditions of a Tenant (Status.Conditions).
const (
	// ConditionPlaced is True when the tenant's data is in the datastore
	// its spec names; False while it moves (reason Moving) or when a move
	// failed (MoveFailed: the tenant runs where it was, and the host
	// tries again later) or cannot be made (UnknownDatastore).
	ConditionPlaced = "Placed"
	// ConditionRestored is True once the tenant was filled from
	// spec.restoreFrom; False (RestoreFailed) when that failed.
	ConditionRestored = "Restored"
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
	// Datastore names the datastore that keeps the tenant's data, one of
	// the host's (`sqlkube host --tenant-datastore NAME=DSN`; "sqlite":
	// a SQLite file under the host's data directory). Empty: the host's
	// default when the tenant is first placed, and wherever it is since.
	// Naming another moves the tenant there.
	Datastore string `json:"datastore,omitempty"`
	// Quota is the tenant's datastore quota (etcd's
	// --quota-backend-bytes; empty: the host's default).
	Quota *resource.Quantity `json:"quota,omitempty"`
	// Suspended frees the tenant's memory and connections; its data is
	// kept, and a request to its endpoint resumes it.
	Suspended bool `json:"suspended,omitempty"`
	// RestoreFrom, if set on a new Tenant, fills its datastore from a
	// backup before it first starts, instead of an empty cluster: the
	// same objects at the backup's revision, and the same identity (the
	// backup carries its token). Read once, when the tenant is placed.
	RestoreFrom *RestoreSource `json:"restoreFrom,omitempty"`
}

// RestoreSource names a tenant backup: one of Backup or File.
type RestoreSource struct {
	// Backup names a Completed TenantBackup.
	Backup string `json:"backup,omitempty"`
	// File is a backup file on the host's machine, an absolute path (as
	// `sqlkube tenant backup --to` writes one).
	File string `json:"file,omitempty"`
}

// Status is what the host reports.
type Status struct {
	Phase   string `json:"phase,omitempty"`
	Message string `json:"message,omitempty"`
	// Port is the tenant's API port, from the host's range; Endpoint its
	// URL.
	Port     int    `json:"port,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	// DNSPort is where its cluster DNS answers, UDP and TCP, on the
	// host's advertised address (once it has a real node; 0: none).
	DNSPort int `json:"dnsPort,omitempty"`
	// KubeconfigSecret names the Secret (in Namespace) holding the admin
	// kubeconfig, key "kubeconfig".
	KubeconfigSecret string `json:"kubeconfigSecret,omitempty"`
	// Datastore names the datastore the data is in ("" until placed).
	Datastore string `json:"datastore,omitempty"`
	// QuotaBytes is the datastore quota the host applied last, in bytes
	// (spec.quota, or the host's default; negative: none). A change of
	// it clears a NOSPACE alarm when the datastore is under the new
	// quota (applyQuota).
	QuotaBytes int64 `json:"quotaBytes,omitempty"`
	// DropPending names datastores that hold a copy of the tenant's data
	// that is not the one it runs on: what a move left behind, or the
	// target of a move or restore that failed or was cut short. The host
	// drops them (never Datastore's).
	DropPending []string `json:"dropPending,omitempty"`
	// Conditions: Placed, Restored.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
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
	return clusterCRD(apiextensionsv1.CustomResourceDefinitionNames{
		Plural: Resource, Singular: "tenant", Kind: Kind, ListKind: Kind + "List", ShortNames: []string{"tnt"},
	}, []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
		{Name: "Endpoint", Type: "string", JSONPath: ".status.endpoint"},
		{Name: "Datastore", Type: "string", JSONPath: ".status.datastore"},
		{Name: "Suspended", Type: "boolean", JSONPath: ".spec.suspended"},
	}, apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"version":   str("Kubernetes version (empty: the host's)"),
		"datastore": str("where the tenant's data is kept (empty: the host's default)"),
		"quota": {XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
			Pattern:     `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`,
			Description: "datastore quota in bytes (empty: the host's default)"},
		"suspended": {Type: "boolean", Description: "suspend: memory and connections freed, data kept"},
		"restoreFrom": {Type: "object", Description: "on a new tenant: fill it from a backup (one of backup, file)",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"backup": str("a Completed TenantBackup's name"),
				"file":   str("a backup file on the host's machine (absolute path)"),
			}},
	}})
}

// clusterCRD is a cluster-scoped resource of the tenant API group, served
// and stored in Version with a status subresource: names, its printer
// columns (an Age column is added) and its spec's schema; its status is
// kept as written.
func clusterCRD(names apiextensionsv1.CustomResourceDefinitionNames, columns []apiextensionsv1.CustomResourceColumnDefinition, spec apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	yes := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: names.Plural + "." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Scope: apiextensionsv1.ClusterScoped,
			Names: names,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Subresources:             &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: append(columns, apiextensionsv1.CustomResourceColumnDefinition{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}),
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"},
						"spec":   spec,
						"status": {Type: "object", XPreserveUnknownFields: &yes},
					},
				}},
			}},
		},
	}
}
