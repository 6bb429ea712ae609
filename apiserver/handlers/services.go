package handlers

import (
	"fmt"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// needsNodePorts: NodePort services, and LoadBalancer ones unless
// spec.allocateLoadBalancerNodePorts is false.
func needsNodePorts(svc *corev1.Service) bool {
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		return svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return svc.Spec.Type == corev1.ServiceTypeNodePort
}

// allocateService defaults a new service and gives it a cluster IP (from
// --service-cluster-ip-range, unless headless or ExternalName) and node
// ports (NodePort and LoadBalancer types); undo releases them if the
// create does not happen.
func (h *Request) allocateService(obj runtime.Object) (undo func(), err error) {
	svc, ok := obj.(*corev1.Service)
	if !ok || h.API.ClusterIPs == nil {
		return func() {}, nil
	}
	registry.DefaultService(svc)
	owner := svc.Namespace + "/" + svc.Name
	var ips, ports []string
	undo = func() {
		for _, ip := range ips {
			_ = h.API.ClusterIPs.Release(h.Ctx, ip)
		}
		for _, p := range ports {
			_ = h.API.NodePorts.Release(h.Ctx, p)
		}
	}
	invalid := func(path *field.Path, value any, err error) error {
		undo()
		return apierrors.NewInvalid(h.Resource.GVK.GroupKind(), svc.Name, field.ErrorList{field.Invalid(path, value, err.Error())})
	}
	if svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		ip, err := h.API.ClusterIPs.Allocate(h.Ctx, svc.Spec.ClusterIP, owner)
		if err != nil {
			return nil, invalid(field.NewPath("spec", "clusterIP"), svc.Spec.ClusterIP, err)
		}
		ips = append(ips, ip)
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip, []string{ip}
	} else if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	}
	if needsNodePorts(svc) {
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			requested := ""
			if p.NodePort != 0 {
				requested = fmt.Sprint(p.NodePort)
			}
			port, err := h.API.NodePorts.Allocate(h.Ctx, requested, owner)
			if err != nil {
				return nil, invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), p.NodePort, err)
			}
			ports = append(ports, port)
			var n int32
			_, _ = fmt.Sscan(port, &n)
			p.NodePort = n
		}
	}
	return undo, nil
}

// releaseService gives back a deleted service's cluster IP and node ports.
func (h *Request) releaseService(obj runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok || h.API.ClusterIPs == nil {
		return
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != corev1.ClusterIPNone && ip != "" {
			_ = h.API.ClusterIPs.Release(h.Ctx, ip)
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			_ = h.API.NodePorts.Release(h.Ctx, fmt.Sprint(p.NodePort))
		}
	}
}

// keepServiceAllocations carries a service's allocations over an update:
// the cluster IP cannot change (422), an omitted one stays, and node ports
// omitted for ports that had them stay.
func keepServiceAllocations(existing, updated runtime.Object) error {
	old, ok := existing.(*corev1.Service)
	if !ok {
		return nil
	}
	svc := updated.(*corev1.Service)
	if svc.Spec.ClusterIP == "" {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
	}
	if svc.Spec.ClusterIP != old.Spec.ClusterIP {
		return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), svc.Name, field.ErrorList{
			field.Invalid(field.NewPath("spec", "clusterIP"), svc.Spec.ClusterIP, "field is immutable"),
		})
	}
	if len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIPs = old.Spec.ClusterIPs
	}
	registry.DefaultService(svc)
	for i := range svc.Spec.Ports {
		for _, op := range old.Spec.Ports {
			if svc.Spec.Ports[i].NodePort == 0 && op.Port == svc.Spec.Ports[i].Port && op.Protocol == svc.Spec.Ports[i].Protocol {
				svc.Spec.Ports[i].NodePort = op.NodePort
			}
		}
	}
	return nil
}
