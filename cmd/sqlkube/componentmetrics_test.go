package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/internal/stablemetrics"
	"github.com/sqlkube/sqlkube/node/fake"
)

// componentsNotProduced are the scheduler's and the controller manager's
// stable and beta metrics that TestComponents_StableAndBeta's scenario
// cannot produce, and why.
var componentsNotProduced = map[string]string{
	"scheduler_permit_wait_duration_seconds": "recorded only for a pod a Permit plugin makes wait; the default profile has no Permit plugin",
	"storage_operation_duration_seconds":     noVolumes,
	"volume_operation_total_seconds":         noVolumes,
}

const (
	noVolumes = "recorded for a volume plugin's operations (provision, attach, mount); simulated nodes mount nothing and no provisioner runs"
)

// TestComponents_StableAndBeta checks that the in-process scheduler's and
// controller manager's endpoints (as kube-scheduler's and
// kube-controller-manager's) serve every stable and beta metric
// Kubernetes declares for them (stablemetrics.Scheduler and
// .ControllerManager), with its type, labels and buckets, each on its
// component's endpoint only, after a scenario on simulated nodes that
// exercises them: a Deployment scaled until the scheduler has sampled its
// plugins, an unschedulable pod, a preemption, a Job that completes, a
// Job a pod-failure policy fails and a HorizontalPodAutoscaler. (A family
// without labels, such as cronjob_controller_job_creation_skew_duration_seconds,
// is served from its registration on, with no observations.)
func TestComponents_StableAndBeta(t *testing.T) {
	scheduler, _, ok := stablemetrics.List(t, stablemetrics.Scheduler)
	if !ok {
		t.Skip("k8s.io/kubernetes is not in the module cache")
	}
	kcm, source, _ := stablemetrics.List(t, stablemetrics.ControllerManager)
	t.Logf("the controller manager's from %s", source)
	kcmPort, schedPort := freeTCPPort(t), freeTCPPort(t)
	cfg := startTestServer(t, "--fake-nodes", "2",
		"--kube-controller-manager-arg=--secure-port="+strconv.Itoa(kcmPort), "--kube-controller-manager-arg=--bind-address=127.0.0.1",
		"--kube-scheduler-arg=--secure-port="+strconv.Itoa(schedPort), "--kube-scheduler-arg=--bind-address=127.0.0.1")
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	scrape := componentScraper(t, cfg)

	exerciseComponents(t, ctx, cs, func() bool {
		return scrape(schedPort, "/metrics")["scheduler_plugin_execution_duration_seconds"] != nil
	})

	for _, c := range []struct {
		name     string
		port     int
		declared []stablemetrics.Metric
	}{{"kube-scheduler", schedPort, scheduler}, {"kube-controller-manager", kcmPort, kcm}} {
		t.Run(c.name, func(t *testing.T) {
			var want []stablemetrics.Metric
			for _, m := range c.declared {
				if _, skip := componentsNotProduced[m.Name]; !skip {
					want = append(want, m)
				}
			}
			// Families appear as the controllers and the scheduler
			// get to the scenario's objects.
			var mfs map[string]*dto.MetricFamily
			var missing []string
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
				mfs, missing = scrape(c.port, "/metrics"), nil
				if c.name == "kube-scheduler" {
					// The pods' requests and limits, as kube-scheduler
					// serves them apart.
					maps.Copy(mfs, scrape(c.port, "/metrics/resources"))
				}
				for _, m := range want {
					if mfs[m.Name] == nil {
						missing = append(missing, m.Name)
					}
				}
				return len(missing) == 0, nil
			})
			if err != nil {
				t.Fatalf("%s's /metrics lacks %v", c.name, missing)
			}
			t.Logf("checking %d metrics", len(want))
			for _, m := range want {
				stablemetrics.Check(t, m, mfs[m.Name])
			}
			for _, m := range c.declared {
				if reason, ok := componentsNotProduced[m.Name]; ok && mfs[m.Name] != nil {
					t.Errorf("%s is served, though listed as not produced (%s)", m.Name, reason)
				}
			}
		})
	}

	// Each on its own component's endpoint: not on the API server's.
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	api := parseFamilies(t, string(body))
	for _, m := range append(scheduler, kcm...) {
		if api[m.Name] != nil {
			t.Errorf("the API server's /metrics serves %s", m.Name)
		}
	}
}

// componentScraper returns a function that reads the metric families an
// in-process component's endpoint on port serves at path, as the admin
// of cfg.
func componentScraper(t *testing.T, cfg *rest.Config) func(port int, path string) map[string]*dto.MetricFamily {
	t.Helper()
	roots, cert := adminTLS(t, cfg)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}},
	}}
	t.Cleanup(client.CloseIdleConnections)
	return func(port int, path string) map[string]*dto.MetricFamily {
		t.Helper()
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatalf("GET %s on %d: %v", path, port, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s on %d: %d %v", path, port, resp.StatusCode, err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("parsing %s on %d: %v", path, port, err)
		}
		return mfs
	}
}

// exerciseComponents runs the scenario in namespace default on the
// simulated nodes fake-0 and fake-1 (32 CPUs each); sampled reports when
// the scheduler has sampled its plugins' durations (it does so for one
// scheduling cycle in ten), and the Deployment grows until it has.
func exerciseComponents(t *testing.T, ctx context.Context, cs kubernetes.Interface, sampled func() bool) {
	t.Helper()
	ns := metav1.NamespaceDefault
	container := func(cpu string) []corev1.Container {
		// Limits too: kube_pod_resource_limit.
		return []corev1.Container{{Name: "c", Image: "registry.example/pause:1", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
		}}}
	}
	create := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	labels := map[string]string{"app": "web"}
	_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: container("10m")}}},
	}, metav1.CreateOptions{})
	create("Deployment", err)
	_, err = cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To[int32](1), MaxReplicas: 400,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
			}}},
		},
	}, metav1.CreateOptions{})
	create("HorizontalPodAutoscaler", err)

	// A Job whose two pods succeed (a simulated node ends a Job's pod
	// after 1 s), and one a pod-failure policy fails on its pod's exit 1.
	_, err = cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "completes"},
		Spec: batchv1.JobSpec{Completions: ptr.To[int32](2), Parallelism: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: container("10m")}}},
	}, metav1.CreateOptions{})
	create("Job", err)
	_, err = cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "fails"},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](3),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1},
				},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{fake.AnnotationFailAfter: "1s"}},
				Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: container("10m")}}},
	}, metav1.CreateOptions{})
	create("Job", err)

	// An unschedulable pod: no node has 100 CPUs.
	_, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "too-big"},
		Spec: corev1.PodSpec{Containers: container("100")}}, metav1.CreateOptions{})
	create("pod", err)

	// A preemption: two low-priority pods take 25 of each node's 32
	// CPUs; a high-priority one that needs 25 evicts one of them.
	for _, pc := range []schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Value: 10},
		{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000},
	} {
		_, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &pc, metav1.CreateOptions{})
		create("PriorityClass", err)
	}
	// The Priority admission plugin reads PriorityClasses from its
	// informer, which may not have seen them yet.
	createPrioritized := func(name, class string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{PriorityClassName: class, Containers: container("25")}}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name "+class) {
				return false, nil
			}
			return err == nil, err
		})
		create("pod "+name, err)
	}
	for i := range 2 {
		createPrioritized(fmt.Sprintf("low-%d", i), "low")
	}
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound := 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "low-") && p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == 2, nil
	}); err != nil {
		t.Fatalf("the low-priority pods are not both scheduled: %v", err)
	}
	createPrioritized("high", "high")
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "high", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", err
	}); err != nil {
		t.Fatalf("the high-priority pod is not scheduled: %v", err)
	}

	// The scheduler samples its plugins' durations for one cycle in ten:
	// more replicas until it has.
	replicas := int32(10)
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if sampled() {
			return true, nil
		}
		if replicas >= 300 {
			return false, fmt.Errorf("no plugin duration sampled in %d pods' scheduling", replicas)
		}
		replicas += 10
		scale, err := cs.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		scale.Spec.Replicas = replicas
		_, err = cs.AppsV1().Deployments(ns).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{})
		return false, err
	}); err != nil {
		t.Fatal(err)
	}
}
