package bootstrap

import (
	"context"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
)

// defaultServiceCIDRName is the ServiceCIDR kube-apiserver makes of its
// --service-cluster-ip-range.
const defaultServiceCIDRName = "kubernetes"

// ensureDefaultServiceCIDR creates the "kubernetes" ServiceCIDR of
// serviceRange (one CIDR, or two comma-separated for dual stack) if it is
// missing and marks it Ready, as kube-apiserver's default ServiceCIDR
// controller does. An existing one is left as it is.
func ensureDefaultServiceCIDR(ctx context.Context, cs clientset.Interface, serviceRange string) error {
	cidrs := strings.Split(serviceRange, ",")
	for i := range cidrs {
		cidrs[i] = strings.TrimSpace(cidrs[i])
	}
	api := cs.NetworkingV1().ServiceCIDRs()
	cidr, err := api.Get(ctx, defaultServiceCIDRName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cidr, err = api.Create(ctx, &networkingv1.ServiceCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: defaultServiceCIDRName},
			Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cidr, err = api.Get(ctx, defaultServiceCIDRName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return err
	}
	if meta.IsStatusConditionTrue(cidr.Status.Conditions, networkingv1.ServiceCIDRConditionReady) {
		return nil
	}
	meta.SetStatusCondition(&cidr.Status.Conditions, metav1.Condition{
		Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue,
		Reason: "", Message: "Kubernetes default Service CIDR is ready",
	})
	_, err = api.UpdateStatus(ctx, cidr, metav1.UpdateOptions{})
	return err
}
