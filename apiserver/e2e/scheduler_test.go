package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestScheduler_Resources: on `sqlkube server` with three simulated nodes
// of different capacities (each its own `sqlkube node --fake`), pods land
// only where their requests fit (cpu, memory, ephemeral-storage, pods, an
// extended resource); a pod too large for every node stays Pending with
// kube-scheduler's FailedScheduling message and is scheduled as soon as a
// big enough node joins. The scheduler's metrics are on /metrics.
func TestScheduler_Resources(t *testing.T) {
	s := startCommand(t, t.TempDir(), "server")
	cs := s.clientset(t)
	startFakeNodes(t, s, cs, "res-a-", 1, "--capacity", "cpu=2,memory=4Gi,ephemeral-storage=20Gi,pods=10")
	startFakeNodes(t, s, cs, "res-b-", 1, "--capacity", "cpu=4,memory=2Gi,ephemeral-storage=20Gi,pods=10,example.com/gpu=2")
	startFakeNodes(t, s, cs, "res-c-", 1, "--capacity", "cpu=1,memory=8Gi,ephemeral-storage=100Gi,pods=3")
	ns := namespace(t, cs, "resources")

	for _, tc := range []struct{ name, requests, node string }{
		{"gpu", "example.com/gpu=1", "res-b-0"},
		{"cpu", "cpu=3", "res-b-0"},
		{"memory", "memory=6Gi", "res-c-0"},
		{"disk", "ephemeral-storage=50Gi", "res-c-0"},
	} {
		createPod(t, cs, ns, testPod(tc.name, tc.requests))
		if got := waitScheduled(t, cs, ns, tc.name); got != tc.node {
			t.Errorf("pod %s (requests %s) on %s, want %s", tc.name, tc.requests, got, tc.node)
		}
	}

	// Too large for every node: kube-scheduler's message, preemption tried
	// (v1.34 puts the DynamicResources plugin's PostFilter result first).
	createPod(t, cs, ns, testPod("big", "cpu=16"))
	msg := waitFailedScheduling(t, cs, ns, "big", regexp.MustCompile(`Insufficient cpu`))
	if want := regexp.MustCompile(`^0/3 nodes are available: 3 Insufficient cpu\. (no new claims to deallocate, )?preemption: 0/3 nodes are available: 3 (Preemption is not helpful for scheduling|No preemption victims found for incoming pod)\.$`); !want.MatchString(msg) {
		t.Errorf("FailedScheduling message of big:\n got %q\nwant %q", msg, want)
	}

	// res-c-0 takes three pods; the fourth waits.
	fill := testPod("fill", "")
	fill.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "res-c-0"}
	createPod(t, cs, ns, fill)
	if got := waitScheduled(t, cs, ns, "fill"); got != "res-c-0" {
		t.Errorf("pod fill on %s, want res-c-0", got)
	}
	over := fill.DeepCopy()
	over.Name = "over"
	createPod(t, cs, ns, over)
	waitFailedScheduling(t, cs, ns, "over", regexp.MustCompile(`^0/3 nodes are available: 1 Too many pods, 2 node\(s\) didn't match Pod's node affinity/selector\.`))

	// One GPU is left, on res-b-0.
	createPod(t, cs, ns, testPod("gpu2", "example.com/gpu=2"))
	waitFailedScheduling(t, cs, ns, "gpu2", regexp.MustCompile(`^0/3 nodes are available: .*3 Insufficient example\.com/gpu`))

	// Memory and ephemeral storage nowhere to be had (and res-c-0 full).
	createPod(t, cs, ns, testPod("big-memory", "memory=16Gi"))
	waitFailedScheduling(t, cs, ns, "big-memory", regexp.MustCompile(`^0/3 nodes are available: 1 Too many pods, 3 Insufficient memory\.`))
	createPod(t, cs, ns, testPod("big-disk", "ephemeral-storage=200Gi"))
	waitFailedScheduling(t, cs, ns, "big-disk", regexp.MustCompile(`^0/3 nodes are available: 1 Too many pods, 3 Insufficient ephemeral-storage\.`))

	// A big enough node joins: big and big-memory are scheduled there,
	// without a restart.
	startFakeNodes(t, s, cs, "res-d-", 1, "--capacity", "cpu=32,memory=64Gi,ephemeral-storage=100Gi,pods=110")
	joined := time.Now()
	for _, name := range []string{"big", "big-memory"} {
		if got := waitScheduled(t, cs, ns, name); got != "res-d-0" {
			t.Errorf("pod %s on %s, want res-d-0", name, got)
		}
	}
	t.Logf("pending pods bound %v after a big enough node was Ready", time.Since(joined))
	if nodes := podNodes(t, cs, ns); nodes["over"] != "" || nodes["gpu2"] != "" || nodes["big-disk"] != "" {
		t.Errorf("pods that fit nowhere were bound: %v", nodes)
	}
	checkRequestsFit(t, cs)

	// The in-process scheduler's metrics, on the API server's /metrics.
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	checkSchedulerMetrics(t, string(body))
}

// checkRequestsFit checks that on every node the bound pods' requests
// (and their number) stay within the node's allocatable.
func checkRequestsFit(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]corev1.ResourceList{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		u := used[p.Spec.NodeName]
		if u == nil {
			u = corev1.ResourceList{}
			used[p.Spec.NodeName] = u
		}
		q := u[corev1.ResourcePods]
		q.Add(resource.MustParse("1"))
		u[corev1.ResourcePods] = q
		for _, c := range p.Spec.Containers {
			for k, v := range c.Resources.Requests {
				q := u[k]
				q.Add(v)
				u[k] = q
			}
		}
	}
	for _, n := range nodes.Items {
		for k, q := range used[n.Name] {
			if a := n.Status.Allocatable[k]; q.Cmp(a) > 0 {
				t.Errorf("node %s: pods request %s %s, allocatable %s", n.Name, q.String(), k, a.String())
			}
		}
	}
}

// checkSchedulerMetrics checks that a /metrics page has the scheduler's
// metrics, with attempts counted.
func checkSchedulerMetrics(t *testing.T, body string) {
	t.Helper()
	for _, re := range []string{
		`(?m)^scheduler_schedule_attempts_total\{profile="default-scheduler",result="scheduled"\} [1-9]`,
		`(?m)^scheduler_pending_pods\{queue="\w+"\} `,
		`(?m)^scheduler_preemption_attempts_total `,
		`(?m)^scheduler_scheduling_attempt_duration_seconds_count\{`, // v1.34 has no scheduler_e2e_scheduling_duration_seconds
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			var lines []string
			for _, l := range strings.Split(body, "\n") {
				if strings.HasPrefix(l, "scheduler_") {
					lines = append(lines, l)
				}
			}
			t.Errorf("/metrics has no line matching %s; its scheduler lines:\n%s", re, strings.Join(lines, "\n"))
		}
	}
}
