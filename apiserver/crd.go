package apiserver

import (
	"context"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

// crdScheme holds the apiextensions types in their internal and v1
// versions: CRDs are defaulted as v1 and converted to the internal version
// that the upstream validation takes.
var crdScheme = runtime.NewScheme()

func init() {
	install.Install(crdScheme)
}

// crdGVK is the kind CRDs are served and stored as.
var crdGVK = apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")

// crdResource is customresourcedefinitions (apiextensions.k8s.io/v1),
// stored where kube-apiserver stores them. A deletion adds
// customresourcecleanup.apiextensions.k8s.io, which the CRD controller
// removes once the custom resources are gone.
func crdResource() *registry.Resource {
	return &registry.Resource{
		GVK: crdGVK, Plural: "customresourcedefinitions", Singular: "customresourcedefinition",
		ShortNames: []string{"crd", "crds"}, Categories: []string{"api-extensions"}, Status: true,
		New:           func() runtime.Object { return &apiextensionsv1.CustomResourceDefinition{} },
		NewList:       func() runtime.Object { return &apiextensionsv1.CustomResourceDefinitionList{} },
		StoragePrefix: "/apiextensions.k8s.io/customresourcedefinitions",
		PrepareForCreate: func(obj runtime.Object) {
			obj.(*apiextensionsv1.CustomResourceDefinition).Status = apiextensionsv1.CustomResourceDefinitionStatus{}
		},
		Admit:             admitCRD,
		DeletionFinalizer: apiextensionsv1.CustomResourceCleanupFinalizer,
	}
}

// admitCRD defaults a CRD, records its storage version in
// status.storedVersions and validates it as kube-apiserver does (422 with
// the upstream field errors).
func admitCRD(_ context.Context, obj, old runtime.Object) error {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	crdScheme.Default(crd)
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			if !apihelpers.IsStoredVersion(crd, v.Name) {
				crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
			}
			break
		}
	}
	internal, err := internalCRD(crd)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	ctx := context.Background()
	errs := crdvalidation.ValidateCustomResourceDefinition(ctx, internal)
	if old != nil {
		oldInternal, err := internalCRD(old.(*apiextensionsv1.CustomResourceDefinition))
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		errs = crdvalidation.ValidateCustomResourceDefinitionUpdate(ctx, internal, oldInternal)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(crdGVK.GroupKind(), crd.Name, errs)
	}
	return nil
}

// internalCRD converts a v1 CRD to the internal version.
func internalCRD(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	out := &apiextensions.CustomResourceDefinition{}
	if err := crdScheme.Convert(crd.DeepCopy(), out, nil); err != nil {
		return nil, err
	}
	return out, nil
}
