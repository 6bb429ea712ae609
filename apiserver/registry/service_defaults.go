package registry

import corev1 "k8s.io/api/core/v1"

import "k8s.io/apimachinery/pkg/util/intstr"

// DefaultService fills what Kubernetes defaults on a new service.
func DefaultService(svc *corev1.Service) {
	if svc.Spec.Type == "" {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if svc.Spec.SessionAffinity == "" {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if svc.Spec.Type != corev1.ServiceTypeExternalName {
		if svc.Spec.InternalTrafficPolicy == nil {
			cluster := corev1.ServiceInternalTrafficPolicyCluster
			svc.Spec.InternalTrafficPolicy = &cluster
		}
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
		if svc.Spec.IPFamilyPolicy == nil {
			single := corev1.IPFamilyPolicySingleStack
			svc.Spec.IPFamilyPolicy = &single
		}
	}
}
