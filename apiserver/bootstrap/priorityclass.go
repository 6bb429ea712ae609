package bootstrap

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	schedulingv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
)

// ensureSystemPriorityClasses creates Kubernetes' built-in priority
// classes, system-node-critical and system-cluster-critical, where they
// are missing, as kube-apiserver does at every start (the Priority
// admission plugin resolves pods' priorityClassName from these objects).
// Existing ones are left as they are.
func ensureSystemPriorityClasses(ctx context.Context, cs clientset.Interface) error {
	classes := cs.SchedulingV1().PriorityClasses()
	for _, pc := range schedulingv1.SystemPriorityClasses() {
		_, err := classes.Create(ctx, pc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("apiserver: creating priority class %s: %w", pc.Name, err)
		}
	}
	return nil
}
