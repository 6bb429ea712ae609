package registry

import (
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
)

// storageMigrationResources are storagemigration.k8s.io/v1's storage
// version migrations (+status), which kube-controller-manager's
// storage-version-migrator controller carries out: it rewrites every
// object of a resource so that each is stored in the current storage
// version. Cluster-scoped, stored as v1beta1, as kube-apiserver 1.37
// stores them (v1 is new in 1.37). Field selectors: metadata.name only,
// as kube-apiserver.
func storageMigrationResources() []*Resource {
	storage := storagemigrationv1beta1.SchemeGroupVersion
	migrations := resource(storagemigrationv1.SchemeGroupVersion.WithKind("StorageVersionMigration"), "storageversionmigrations", "storageversionmigration", false, true,
		func() runtime.Object { return &storagemigrationv1.StorageVersionMigration{} },
		func() runtime.Object { return &storagemigrationv1.StorageVersionMigrationList{} })
	migrations.StorageVersion = &storage
	return []*Resource{migrations}
}
