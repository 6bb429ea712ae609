package registry

import (
	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/registry/certificates/podcertificaterequest"
	"k8s.io/utils/clock"
)

// certificateResources are certificates.k8s.io/v1's certificate signing
// requests (+status for signers, +approval for approvers), which joining
// nodes use to get their client certificates, cluster trust bundles
// (signers' CA certificates for pods to trust) and pod certificate
// requests (+status; kubelets ask for their pods' certificates), stored
// where and, for the last two, in the version kube-apiserver 1.37 stores
// them (certificates.k8s.io/v1beta1, which 1.36 reads). The field
// selectors are kube-apiserver's (each storage package's getAttrs).
func certificateResources(run Running) []*Resource {
	gv := certificatesv1.SchemeGroupVersion
	csr := resource(gv.WithKind("CertificateSigningRequest"), "certificatesigningrequests", "certificatesigningrequest", false, true,
		func() runtime.Object { return &certificatesv1.CertificateSigningRequest{} },
		func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} }, "csr")
	csr.Approval = true
	csr.Fields = func(obj runtime.Object) fields.Set {
		return fields.Set{"spec.signerName": obj.(*certificatesv1.CertificateSigningRequest).Spec.SignerName}
	}
	storage := certificatesv1beta1.SchemeGroupVersion
	bundles := resource(gv.WithKind("ClusterTrustBundle"), "clustertrustbundles", "clustertrustbundle", false, false,
		func() runtime.Object { return &certificatesv1.ClusterTrustBundle{} },
		func() runtime.Object { return &certificatesv1.ClusterTrustBundleList{} })
	bundles.StorageVersion = &storage
	bundles.Fields = func(obj runtime.Object) fields.Set {
		return fields.Set{"spec.signerName": obj.(*certificatesv1.ClusterTrustBundle).Spec.SignerName}
	}
	requests := resource(gv.WithKind("PodCertificateRequest"), "podcertificaterequests", "podcertificaterequest", true, true,
		func() runtime.Object { return &certificatesv1.PodCertificateRequest{} },
		func() runtime.Object { return &certificatesv1.PodCertificateRequestList{} })
	requests.StorageVersion = &storage
	requests.Fields = func(obj runtime.Object) fields.Set {
		spec := obj.(*certificatesv1.PodCertificateRequest).Spec
		return fields.Set{"spec.signerName": spec.SignerName, "spec.podName": spec.PodName, "spec.nodeName": string(spec.NodeName)}
	}
	// A status write that issues, denies or fails a request needs the
	// writer to be allowed to "sign" for its signer (the authorizer's
	// answer); the clock checks the issued certificate's times.
	requestStrategy := podcertificaterequest.NewStrategy()
	requests.Strategy = requestStrategy
	requests.StatusStrategy = podcertificaterequest.NewStatusStrategy(requestStrategy, lazyAuthorizer(run), clock.RealClock{})
	return []*Resource{csr, bundles, requests}
}
