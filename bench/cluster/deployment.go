package cluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// DeploymentResult is one run of RunDeployment.
type DeploymentResult struct {
	// Running: from the Deployment's create to every replica Running.
	Running time.Duration
	// Available: from the create to the Deployment's status counting
	// every replica available.
	Available time.Duration
	// Gone: from its delete (background propagation) to no pod left.
	Gone time.Duration
	// ServerCPU is the CPU time the sqlkube server process used from the
	// create to every replica Running (RunDeploymentVariant only).
	ServerCPU time.Duration
}

// RunDeployment waits for nodes Ready nodes, creates a Deployment of
// replicas pods in namespace default, waits until all of them run, deletes
// it and waits until every pod is gone. phase, if not nil, is called with
// "create" just before the create, "running" once all replicas run and
// "available" once the Deployment's status counts them all available.
func RunDeployment(ctx context.Context, cfg *rest.Config, nodes, replicas int, phase func(string)) (DeploymentResult, error) {
	var r DeploymentResult
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	if err := WaitReadyNodes(ctx, cs, nodes); err != nil {
		return r, err
	}
	pods, err := WatchPods(ctx, cs, "default")
	if err != nil {
		return r, err
	}
	labels := map[string]string{"app": "bench"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/app:1.0",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
					}},
				}}},
			},
		},
	}
	// The namespace's service account comes from a controller.
	if err := waitServiceAccount(ctx, cs, "default"); err != nil {
		return r, err
	}
	available, err := watchAvailable(ctx, cs, "default", d.Name, int32(replicas))
	if err != nil {
		return r, err
	}
	if phase != nil {
		phase("create")
	}
	start := time.Now()
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return r, err
	}
	if err := pods.Wait(ctx, func(_, _, running int) bool { return running >= replicas }); err != nil {
		e, b, run := pods.Counts()
		return r, fmt.Errorf("cluster: waiting for %d Running pods: %d exist, %d bound, %d Running: %w", replicas, e, b, run, err)
	}
	r.Running = time.Since(start)
	if phase != nil {
		phase("running")
	}
	select {
	case at := <-available:
		r.Available = at.Sub(start)
	case <-ctx.Done():
		return r, fmt.Errorf("cluster: waiting for the Deployment to count %d replicas available: %w", replicas, ctx.Err())
	}
	if phase != nil {
		phase("available")
	}
	start = time.Now()
	bg := metav1.DeletePropagationBackground
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "bench", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		return r, err
	}
	if err := pods.Wait(ctx, func(exists, _, _ int) bool { return exists == 0 }); err != nil {
		e, _, _ := pods.Counts()
		return r, fmt.Errorf("cluster: waiting for pods to go: %d left: %w", e, err)
	}
	r.Gone = time.Since(start)
	return r, nil
}

// WaitReadyNodes waits until n nodes are Ready.
func WaitReadyNodes(ctx context.Context, cs kubernetes.Interface, n int) error {
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err == nil {
			ready := 0
			for _, nd := range list.Items {
				for _, c := range nd.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for %d Ready nodes: %w", n, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchAvailable watches Deployment ns/name until its status counts
// replicas available (or ctx ends) and sends the moment it saw that.
func watchAvailable(ctx context.Context, cs kubernetes.Interface, ns, name string, replicas int32) (<-chan time.Time, error) {
	w, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return nil, err
	}
	at := make(chan time.Time, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Status.AvailableReplicas >= replicas {
				at <- time.Now()
				return
			}
		}
	}()
	return at, nil
}

func waitServiceAccount(ctx context.Context, cs kubernetes.Interface, ns string) error {
	for {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for service account %s/default: %w", ns, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ptr[T any](v T) *T { return &v }
