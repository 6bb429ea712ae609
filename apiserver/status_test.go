package apiserver_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestStatus_StrategyDecides: a write to the status subresource goes
// through the type's Kubernetes status strategy whole, so what it keeps
// is what kube-apiserver keeps: a Deployment's status update keeps a new
// annotation (the deployment controller records the revision that way)
// but not new labels or spec; a CronJob's status patch keeps an
// annotation; a Service's status write cannot touch its spec.
func TestStatus_StrategyDecides(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	labels := map[string]string{"app": "web"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}

	deployments := cs.AppsV1().Deployments("default")
	d, err := deployments.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: labels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	d.Labels = map[string]string{"app": "web", "added": "by-status"}
	d.Spec.Paused = true
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas = 1
	got, err := deployments.UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := deployments.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []*appsv1.Deployment{got, stored} {
		if obj.Annotations["deployment.kubernetes.io/revision"] != "1" {
			t.Fatalf("status update lost the annotation: %v", obj.Annotations)
		}
		if obj.Labels["added"] != "" || obj.Spec.Paused {
			t.Fatalf("status update changed labels %v or spec (paused %v)", obj.Labels, obj.Spec.Paused)
		}
		if obj.Status.Replicas != 1 {
			t.Fatalf("status update lost the status: %+v", obj.Status)
		}
	}
	// A status patch too.
	got, err = deployments.Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"2"}},"status":{"replicas":2}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations["deployment.kubernetes.io/revision"] != "2" || got.Status.Replicas != 2 {
		t.Fatalf("status patch: annotations %v, replicas %d", got.Annotations, got.Status.Replicas)
	}

	cronJobs := cs.BatchV1().CronJobs("default")
	if _, err := cronJobs.Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly"},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cj, err := cronJobs.Patch(ctx, "nightly", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"patched":"true"}},"spec":{"suspend":true},"status":{"lastScheduleTime":"2026-11-26T03:00:00Z"}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if cj.Annotations["patched"] != "true" || cj.Status.LastScheduleTime == nil {
		t.Fatalf("cronjob status patch: annotations %v, lastScheduleTime %v", cj.Annotations, cj.Status.LastScheduleTime)
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		t.Fatal("cronjob status patch changed the spec")
	}

	services := cs.CoreV1().Services("default")
	if _, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := services.Patch(ctx, "lb", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"lb":"assigned"}},"spec":{"sessionAffinity":"ClientIP"},"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityNone || len(svc.Status.LoadBalancer.Ingress) != 1 || svc.Annotations["lb"] != "assigned" {
		t.Fatalf("service status patch: session affinity %s, ingress %v, annotations %v", svc.Spec.SessionAffinity, svc.Status.LoadBalancer.Ingress, svc.Annotations)
	}
}
