package registry

import (
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// certificateResources are certificates.k8s.io/v1's certificate signing
// requests (+status for signers, +approval for approvers), which joining
// nodes use to get their client certificates. Cluster-scoped, stored
// where kube-apiserver stores them.
func certificateResources() []*Resource {
	r := resource(certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "certificatesigningrequests", "certificatesigningrequest", false, true,
		func() runtime.Object { return &certificatesv1.CertificateSigningRequest{} },
		func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} }, "csr")
	r.Approval = true
	r.Fields = func(obj runtime.Object) fields.Set {
		return fields.Set{"spec.signerName": obj.(*certificatesv1.CertificateSigningRequest).Spec.SignerName}
	}
	return []*Resource{r}
}
