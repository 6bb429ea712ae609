package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// TestScheduler_Preemption: two simulated nodes are full of low-priority
// pods, three of them guarded by a PodDisruptionBudget that allows no
// disruption (minAvailable 3). A pod of a higher PriorityClass preempts the one pod the
// budget does not guard: the victim is deleted gracefully (its grace
// period, a DisruptionTarget condition, a Preempted event), the preemptor
// is nominated to the victim's node, then bound there.
func TestScheduler_Preemption(t *testing.T) {
	s := startCommand(t, t.TempDir(), "server")
	cs := s.clientset(t)
	ctx := context.Background()
	startFakeNodes(t, s, cs, "pre-", 2, "--capacity", "cpu=2,memory=8Gi,pods=10")
	ns := namespace(t, cs, "preemption")
	for name, value := range map[string]int32{"low": 100, "high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// pre-0: g1, g2 (guarded); pre-1: g3 (guarded), u1.
	guard := map[string]string{"guard": "yes"}
	for _, v := range []struct {
		name, node string
		guarded    bool
	}{{"g1", "pre-0", true}, {"g2", "pre-0", true}, {"g3", "pre-1", true}, {"u1", "pre-1", false}} {
		p := testPod(v.name, "cpu=1")
		p.Spec.PriorityClassName = "low"
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: v.node}
		if v.guarded {
			p.Labels = guard
		}
		createPod(t, cs, ns, p)
		if got := waitScheduled(t, cs, ns, v.name); got != v.node {
			t.Fatalf("pod %s on %s, want %s", v.name, got, v.node)
		}
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			// An integer minAvailable: bare pods have no scale for
			// maxUnavailable.
			MinAvailable: ptr.To(intstr.FromInt32(3)),
			Selector:     &metav1.LabelSelector{MatchLabels: guard},
		},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the disruption controller to count the guarded pods", func(ctx context.Context) (bool, error) {
		b, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guard", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return b.Status.ObservedGeneration == b.Generation && b.Status.ExpectedPods == 3 && b.Status.CurrentHealthy == 3 && b.Status.DisruptionsAllowed == 0, nil
	})

	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, schedWait)
	defer cancel()
	w, err := cs.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	high := testPod("high", "cpu=1")
	high.Spec.PriorityClassName = "high"
	createPod(t, cs, ns, high)

	var nominated, bound, victimDeleted string
	var graceful, disruptionTarget bool
	for bound == "" || victimDeleted == "" {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-wctx.Done():
			t.Fatalf("preemption did not finish: nominated %q, bound %q, victim deleted %q", nominated, bound, victimDeleted)
		}
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			t.Fatalf("watch: %v", ev.Object)
		}
		switch {
		case p.Name == "high":
			if p.Status.NominatedNodeName != "" && nominated == "" {
				nominated = p.Status.NominatedNodeName
			}
			if p.Spec.NodeName != "" {
				if nominated == "" {
					t.Errorf("preemptor bound to %s before it was nominated", p.Spec.NodeName)
				}
				bound = p.Spec.NodeName
			}
		case ev.Type == watch.Deleted:
			if victimDeleted != "" {
				t.Errorf("a second victim: %s (first %s)", p.Name, victimDeleted)
			}
			victimDeleted = p.Name
		case p.DeletionTimestamp != nil:
			if p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 30 {
				graceful = true
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "PreemptionByScheduler" {
					disruptionTarget = true
				}
			}
		}
	}
	if victimDeleted != "u1" {
		t.Errorf("victim %s, want u1 (the only pod the budget does not guard)", victimDeleted)
	}
	if nominated != "pre-1" || bound != "pre-1" {
		t.Errorf("preemptor nominated to %q and bound to %q, want pre-1", nominated, bound)
	}
	if !graceful || !disruptionTarget {
		t.Errorf("victim deleted gracefully (grace period 30s): %v; DisruptionTarget PreemptionByScheduler: %v", graceful, disruptionTarget)
	}
	poll(t, "Preempted event of u1", func(ctx context.Context) (bool, error) {
		evs, err := podEvents(ctx, cs, ns, "u1", "Preempted")
		return len(evs) == 1 && regexp.MustCompile(`^Preempted by pod \S+ on node pre-1$`).MatchString(evs[0].Message), err
	})
	nodes := podNodes(t, cs, ns)
	if want := map[string]string{"g1": "pre-0", "g2": "pre-0", "g3": "pre-1", "high": "pre-1"}; fmt.Sprint(nodes) != fmt.Sprint(want) {
		t.Errorf("pods after preemption: %v, want %v", nodes, want)
	}

	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^scheduler_preemption_attempts_total [1-9]`).Match(body) ||
		!regexp.MustCompile(`(?m)^scheduler_preemption_victims_count 1$`).Match(body) {
		t.Errorf("/metrics does not count one preemption with one victim")
	}
}
