package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
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

	// A big enough node joins: big is scheduled there, without a restart.
	startFakeNodes(t, s, cs, "res-d-", 1, "--capacity", "cpu=32,memory=64Gi,ephemeral-storage=100Gi,pods=110")
	if got := waitScheduled(t, cs, ns, "big"); got != "res-d-0" {
		t.Errorf("pod big on %s, want res-d-0", got)
	}
	if nodes := podNodes(t, cs, ns); nodes["over"] != "" || nodes["gpu2"] != "" {
		t.Errorf("pods that fit nowhere were bound: %v", nodes)
	}

	// The in-process scheduler's metrics, on the API server's /metrics.
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	checkSchedulerMetrics(t, string(body))
}

// checkSchedulerMetrics checks that a /metrics page has the scheduler's
// metrics, with attempts counted.
func checkSchedulerMetrics(t *testing.T, body string) {
	t.Helper()
	for _, re := range []string{
		`(?m)^scheduler_schedule_attempts_total\{profile="default-scheduler",result="scheduled"\} [1-9]`,
		`(?m)^scheduler_pending_pods\{queue="\w+"\} `,
		`(?m)^scheduler_preemption_attempts_total `,
		`(?m)^scheduler_(e2e_scheduling|scheduling_attempt)_duration_seconds_count\{`,
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
