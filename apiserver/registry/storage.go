package registry

import (
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// storageGroupResources are the storage.k8s.io/v1 resources served so far:
// volume attachments (with status), which the Node authorizer follows to
// let a node read the volumes attached to it, and CSI drivers, which
// NodeRestriction reads to check the audiences of the tokens nodes ask
// for. Both are cluster-scoped and stored where kube-apiserver stores
// them.
func storageGroupResources() []*Resource {
	gv := storagev1.SchemeGroupVersion
	return []*Resource{
		resource(gv.WithKind("VolumeAttachment"), "volumeattachments", "volumeattachment", false, true,
			func() runtime.Object { return &storagev1.VolumeAttachment{} }, func() runtime.Object { return &storagev1.VolumeAttachmentList{} }),
		resource(gv.WithKind("CSIDriver"), "csidrivers", "csidriver", false, false,
			func() runtime.Object { return &storagev1.CSIDriver{} }, func() runtime.Object { return &storagev1.CSIDriverList{} }),
	}
}
