package bootstrap

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	clientset "k8s.io/client-go/kubernetes"
)

// ensureFlowControlDefaults creates kube-apiserver's mandatory and
// suggested priority levels and flow schemas that are missing, and marks
// the flow schemas' priority levels found, as kube-apiserver's flow
// control configuration controller does at start (sqlkube bounds requests
// with its in-flight limits; these are served for the tools that read
// them). Existing objects are left as they are.
func ensureFlowControlDefaults(ctx context.Context, cs clientset.Interface) error {
	api := cs.FlowcontrolV1()
	// Each object on its own, side by side: a flow schema may name a
	// priority level that is not there yet (its condition says whether
	// it is found, and every one named here is made in this call).
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(rbacParallel)
	for _, pl := range append(append([]*flowcontrolv1.PriorityLevelConfiguration{}, bootstrap.MandatoryPriorityLevelConfigurations...), bootstrap.SuggestedPriorityLevelConfigurations...) {
		g.Go(func() error {
			if _, err := api.PriorityLevelConfigurations().Create(ctx, pl.DeepCopy(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("priority level %s: %w", pl.Name, err)
			}
			return nil
		})
	}
	for _, fs := range append(append([]*flowcontrolv1.FlowSchema{}, bootstrap.MandatoryFlowSchemas...), bootstrap.SuggestedFlowSchemas...) {
		g.Go(func() error {
			created, err := api.FlowSchemas().Create(ctx, fs.DeepCopy(), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("flow schema %s: %w", fs.Name, err)
			}
			pl := created.Spec.PriorityLevelConfiguration.Name
			created.Status.Conditions = []flowcontrolv1.FlowSchemaCondition{{
				Type: flowcontrolv1.FlowSchemaConditionDangling, Status: flowcontrolv1.ConditionFalse, Reason: "Found",
				Message:            fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q and it exists", pl),
				LastTransitionTime: metav1.Now(),
			}}
			if _, err := api.FlowSchemas().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("flow schema %s status: %w", fs.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}
