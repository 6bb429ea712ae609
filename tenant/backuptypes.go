package tenant

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The TenantBackup resource: one backup of one tenant, written by the
// host to a file of its backup directory (as a VolumeSnapshot is one
// snapshot of one volume). It is not owned by its Tenant: a backup
// outlives the tenant, which it can make again (Spec.RestoreFrom).
const (
	BackupKind     = "TenantBackup"
	BackupResource = "tenantbackups"
)

// BackupGVR is the TenantBackup resource's group, version and resource.
var BackupGVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: BackupResource}

// BackupFinalizer keeps a deleted TenantBackup until its file is gone.
const BackupFinalizer = "sqlkube.io/tenant-backup"

// Phases of a TenantBackup.
const (
	BackupPending   = "Pending" // waiting for its tenant to be placed
	BackupRunning   = "Running"
	BackupCompleted = "Completed" // Status.File holds it
	BackupFailed    = "Failed"    // Status.Message says why; not tried again
)

// Keys of a tenant backup's metadata (the dump header's meta): what
// restores the tenant, its identity included.
const (
	// MetaTenant is the backed-up tenant's name.
	MetaTenant = "sqlkube.io/tenant"
	// MetaToken is its cluster token, which opens the identity (CAs,
	// keys) sealed in its data: a backup is as secret as the tenant.
	MetaToken = "sqlkube.io/tenant-token"
	// MetaSpec is its spec, JSON.
	MetaSpec = "sqlkube.io/tenant-spec"
)

// Backup is a TenantBackup.
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BackupSpec   `json:"spec,omitempty"`
	Status            BackupStatus `json:"status,omitempty"`
}

// BackupSpec says what to back up.
type BackupSpec struct {
	// Tenant names the Tenant to back up.
	Tenant string `json:"tenant"`
}

// BackupStatus says where the backup stands.
type BackupStatus struct {
	Phase   string `json:"phase,omitempty"`
	Message string `json:"message,omitempty"`
	// File is the backup on the host's machine: a sqlkube dump (gzip'd
	// JSON lines, `sqlkube datastore restore` reads it too) whose header
	// carries the tenant's name, spec and token.
	File string `json:"file,omitempty"`
	// Datastore names the datastore it was read from.
	Datastore string `json:"datastore,omitempty"`
	// Revision is the tenant's revision the backup holds: every write up
	// to it, none after.
	Revision int64 `json:"revision,omitempty"`
	// Keys counts the live keys; Size is the file's size in bytes;
	// Checksum is that of the keys, values and leases (as `sqlkube
	// datastore` prints it).
	Keys     int64  `json:"keys,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Checksum string `json:"checksum,omitempty"`
	// StartTime and CompletionTime bound the backup.
	StartTime      *metav1.Time `json:"startTime,omitempty"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// BackupFromUnstructured decodes a TenantBackup.
func BackupFromUnstructured(u *unstructured.Unstructured) (*Backup, error) {
	b := &Backup{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
		return nil, fmt.Errorf("tenant backup %s: %w", u.GetName(), err)
	}
	return b, nil
}

// BackupToUnstructured encodes a TenantBackup.
func BackupToUnstructured(b *Backup) (*unstructured.Unstructured, error) {
	b.APIVersion, b.Kind = Group+"/"+Version, BackupKind
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// BackupCRD is the TenantBackup CustomResourceDefinition the host
// installs.
func BackupCRD() *apiextensionsv1.CustomResourceDefinition {
	return clusterCRD(apiextensionsv1.CustomResourceDefinitionNames{
		Plural: BackupResource, Singular: "tenantbackup", Kind: BackupKind, ListKind: BackupKind + "List", ShortNames: []string{"tntb"},
	}, []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Tenant", Type: "string", JSONPath: ".spec.tenant"},
		{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
		{Name: "Revision", Type: "integer", JSONPath: ".status.revision"},
		{Name: "Size", Type: "integer", JSONPath: ".status.size"},
	}, apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"tenant"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"tenant": {Type: "string", MinLength: new(int64(1)), Description: "the Tenant to back up"},
	}})
}
