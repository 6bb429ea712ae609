package registry

import (
	networkingv1 "k8s.io/api/networking/v1"
	resourcev1 "k8s.io/api/resource/v1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/registry/resource/resourceclaim"
	"k8s.io/kubernetes/pkg/registry/resource/resourceclaimtemplate"
)

// clusterResources are the rest of storage.k8s.io/v1 (storage classes,
// CSI nodes (+status) and storage capacities, volume attributes classes),
// networking.k8s.io/v1 and resource.k8s.io/v1, stored where and in the
// version kube-apiserver 1.37 stores them (ingresses under /ingress; device
// taint rules as v1beta2, which 1.36 reads; the rest as v1, where 1.34 stored
// volume attributes classes as v1beta1 and resource.k8s.io as v1beta2:
// objects a 1.34 server wrote are read in those versions and written back
// as v1).
func clusterResources(run Running) []*Resource {
	st, net, res := storagev1.SchemeGroupVersion, networkingv1.SchemeGroupVersion, resourcev1.SchemeGroupVersion
	vac := resource(st.WithKind("VolumeAttributesClass"), "volumeattributesclasses", "volumeattributesclass", false, false,
		func() runtime.Object { return &storagev1.VolumeAttributesClass{} }, func() runtime.Object { return &storagev1.VolumeAttributesClassList{} }, "vac")
	ingresses := resource(net.WithKind("Ingress"), "ingresses", "ingress", true, true,
		func() runtime.Object { return &networkingv1.Ingress{} }, func() runtime.Object { return &networkingv1.IngressList{} }, "ing")
	ingresses.StoragePrefix = "/ingress"
	claims := resource(res.WithKind("ResourceClaim"), "resourceclaims", "resourceclaim", true, true,
		func() runtime.Object { return &resourcev1.ResourceClaim{} }, func() runtime.Object { return &resourcev1.ResourceClaimList{} })
	// The claims' strategies read namespaces (admin access needs a label)
	// and, for status writes, ask the authorizer whether the writer may
	// set a device's allocation or status.
	claimStrategy := resourceclaim.NewStrategy(lazyNamespaces{run: run}, lazyAuthorizer(run))
	claims.Strategy, claims.StatusStrategy = claimStrategy, resourceclaim.NewStatusStrategy(claimStrategy)
	templates := resource(res.WithKind("ResourceClaimTemplate"), "resourceclaimtemplates", "resourceclaimtemplate", true, false,
		func() runtime.Object { return &resourcev1.ResourceClaimTemplate{} }, func() runtime.Object { return &resourcev1.ResourceClaimTemplateList{} })
	templates.Strategy = resourceclaimtemplate.NewStrategy(lazyNamespaces{run: run})
	slices := resource(res.WithKind("ResourceSlice"), "resourceslices", "resourceslice", false, false,
		func() runtime.Object { return &resourcev1.ResourceSlice{} }, func() runtime.Object { return &resourcev1.ResourceSliceList{} })
	slices.Fields = func(obj runtime.Object) fields.Set {
		rs := obj.(*resourcev1.ResourceSlice)
		node := ""
		if rs.Spec.NodeName != nil {
			node = *rs.Spec.NodeName
		}
		return fields.Set{"spec.nodeName": node, "spec.driver": rs.Spec.Driver}
	}
	deviceClasses := resource(res.WithKind("DeviceClass"), "deviceclasses", "deviceclass", false, false,
		func() runtime.Object { return &resourcev1.DeviceClass{} }, func() runtime.Object { return &resourcev1.DeviceClassList{} })
	// Stored as v1 through the internal version, as kube-apiserver
	// does: that codec decodes every version of the group, so what 1.34
	// stored as v1beta2 (v1beta1) reads; the served version's own codec
	// decodes v1 only ("converting (v1beta2.DeviceClass) to
	// (v1.DeviceClass): unknown conversion").
	for _, r := range []*Resource{claims, templates, slices, deviceClasses} {
		r.StorageVersion = &res
	}
	vac.StorageVersion = &st
	// kube-apiserver 1.37 stores device taint rules (GA in 1.37) in
	// v1beta2, which 1.36 reads.
	resStorage := resourcev1beta2.SchemeGroupVersion
	taintRules := resource(res.WithKind("DeviceTaintRule"), "devicetaintrules", "devicetaintrule", false, true,
		func() runtime.Object { return &resourcev1.DeviceTaintRule{} }, func() runtime.Object { return &resourcev1.DeviceTaintRuleList{} })
	taintRules.StorageVersion = &resStorage
	return []*Resource{
		resource(st.WithKind("StorageClass"), "storageclasses", "storageclass", false, false,
			func() runtime.Object { return &storagev1.StorageClass{} }, func() runtime.Object { return &storagev1.StorageClassList{} }, "sc"),
		resource(st.WithKind("CSINode"), "csinodes", "csinode", false, true,
			func() runtime.Object { return &storagev1.CSINode{} }, func() runtime.Object { return &storagev1.CSINodeList{} }),
		resource(st.WithKind("CSIStorageCapacity"), "csistoragecapacities", "csistoragecapacity", true, false,
			func() runtime.Object { return &storagev1.CSIStorageCapacity{} }, func() runtime.Object { return &storagev1.CSIStorageCapacityList{} }),
		vac,
		ingresses,
		resource(net.WithKind("IngressClass"), "ingressclasses", "ingressclass", false, false,
			func() runtime.Object { return &networkingv1.IngressClass{} }, func() runtime.Object { return &networkingv1.IngressClassList{} }),
		resource(net.WithKind("NetworkPolicy"), "networkpolicies", "networkpolicy", true, false,
			func() runtime.Object { return &networkingv1.NetworkPolicy{} }, func() runtime.Object { return &networkingv1.NetworkPolicyList{} }, "netpol"),
		resource(net.WithKind("IPAddress"), "ipaddresses", "ipaddress", false, false,
			func() runtime.Object { return &networkingv1.IPAddress{} }, func() runtime.Object { return &networkingv1.IPAddressList{} }, "ip"),
		resource(net.WithKind("ServiceCIDR"), "servicecidrs", "servicecidr", false, true,
			func() runtime.Object { return &networkingv1.ServiceCIDR{} }, func() runtime.Object { return &networkingv1.ServiceCIDRList{} }),
		deviceClasses, taintRules, claims, templates, slices,
	}
}
