package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Short leader-election timings, so takeovers are quick.
const (
	electionLease = 4 * time.Second
	electionRetry = 500 * time.Millisecond
)

var (
	servingMetrics = regexp.MustCompile(`(?m)^.*serving metrics.*$`)
	metricsURL     = regexp.MustCompile(`"address":"(http://[^"]+)"`)
	leading        = regexp.MustCompile(`(?m)^leader_election_master_status\{name="kube-scheduler"\} 1$`)
)

// schedulerProc is a running `sqlkube scheduler` and where its metrics are.
type schedulerProc struct {
	*proc
	metrics string
}

// leads tells whether the scheduler says it holds the lease
// (leader_election_master_status).
func (p *schedulerProc) leads(t *testing.T) bool {
	t.Helper()
	return leading.MatchString(getMetrics(t, p.metrics))
}

// waitLeading waits until p holds the lease and returns how long that took.
func (p *schedulerProc) waitLeading(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	poll(t, "sqlkube scheduler to lead", func(context.Context) (bool, error) { return p.leads(t), nil })
	return time.Since(start)
}

// TestScheduler_LeaderElection: two `sqlkube scheduler` processes against
// `sqlkube server --disable-scheduler`: one holds the Lease
// kube-system/kube-scheduler and schedules; the other takes over when the
// leader stops on SIGTERM (it releases the lease) and when it is killed
// (the lease expires); no pod is bound twice. A standby stops cleanly. The
// leader serves the scheduler's metrics on --metrics-address.
func TestScheduler_LeaderElection(t *testing.T) {
	s := startCommand(t, t.TempDir(), "server", "--disable-scheduler", "--fake-nodes", "2")
	cs := s.clientset(t)
	ns := namespace(t, cs, "election")
	startScheduler := func() *schedulerProc {
		p := startProc(t, "scheduler", "--kubeconfig", s.kubeconfig,
			"--leader-elect-lease-duration", electionLease.String(),
			"--leader-elect-renew-deadline", (electionLease * 3 / 4).String(),
			"--leader-elect-retry-period", electionRetry.String(),
			"--metrics-address", "127.0.0.1:0")
		return &schedulerProc{proc: p, metrics: metricsURL.FindStringSubmatch(p.waitLog(t, servingMetrics))[1]}
	}

	a := startScheduler()
	a.waitLeading(t)
	holderA := leaseHolder(t, cs)
	b := startScheduler()
	createPods(t, cs, ns, "first", 5)
	waitPodsScheduled(t, cs, ns, "first", 5)
	waitScheduledEvents(t, cs, ns, "first", 5)
	if b.leads(t) || leaseHolder(t, cs) != holderA {
		t.Fatalf("the standby took the lease while the leader ran:\n%s", b.out)
	}
	checkSchedulerMetrics(t, getMetrics(t, a.metrics))

	// SIGTERM: the leader releases the lease; the standby takes it at once.
	stopped := time.Now()
	a.stop(t, syscall.SIGTERM)
	b.waitLeading(t)
	took := time.Since(stopped)
	t.Logf("takeover after SIGTERM of the leader: %v", took)
	if took > electionLease {
		t.Errorf("after SIGTERM of the leader the standby took over in %v, want within the lease duration %v", took, electionLease)
	}
	holderB := leaseHolder(t, cs)
	if holderB == holderA || holderB == "" {
		t.Errorf("lease holder after the takeover %q (before %q)", holderB, holderA)
	}
	createPods(t, cs, ns, "second", 5)
	waitPodsScheduled(t, cs, ns, "second", 5)
	waitScheduledEvents(t, cs, ns, "second", 5)

	// SIGKILL while pods are being scheduled: the lease expires.
	c := startScheduler()
	createPods(t, cs, ns, "third", 20)
	killed := time.Now()
	b.stop(t, syscall.SIGKILL)
	c.waitLeading(t)
	took = time.Since(killed)
	t.Logf("takeover after SIGKILL of the leader: %v", took)
	// The standby finds the lease expired on its first try (retry period,
	// jittered up to 2.2×) after the lease duration since the last renewal.
	if limit := electionLease + 22*electionRetry/10 + 2*time.Second; took > limit {
		t.Errorf("after SIGKILL of the leader the standby took over in %v, want within %v (lease duration %v, retry period %v)", took, limit, electionLease, electionRetry)
	}
	if h := leaseHolder(t, cs); h == holderB || h == "" {
		t.Errorf("lease holder after the second takeover %q (before %q)", h, holderB)
	}
	waitPodsScheduled(t, cs, ns, "third", 20)
	createPods(t, cs, ns, "fourth", 5)
	waitPodsScheduled(t, cs, ns, "fourth", 5)
	waitScheduledEvents(t, cs, ns, "fourth", 5)

	// A standby stops cleanly on SIGTERM, and the leader leads on.
	d := startScheduler()
	d.stop(t, syscall.SIGTERM)
	if !c.leads(t) {
		t.Errorf("the leader stopped leading when a standby stopped")
	}

	// No pod was bound twice: at most one Scheduled event each (a killed
	// leader may not have sent its last ones), no binding refused.
	evs, err := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scheduled := map[string]int32{}
	for _, e := range evs.Items {
		switch e.Reason {
		case "Scheduled":
			scheduled[e.InvolvedObject.Name] += max(e.Count, 1)
		case "FailedScheduling":
			t.Errorf("FailedScheduling for %s: %s", e.InvolvedObject.Name, e.Message)
		}
	}
	for name, n := range scheduled {
		if n > 1 {
			t.Errorf("pod %s was scheduled %d times", name, n)
		}
	}
}

func leaseHolder(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), "kube-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// createPods creates pods PREFIX-0 … PREFIX-(n-1).
func createPods(t *testing.T, cs kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	for i := range n {
		createPod(t, cs, ns, testPod(fmt.Sprintf("%s-%d", prefix, i), "cpu=10m"))
	}
}

func waitPodsScheduled(t *testing.T, cs kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	for i := range n {
		waitScheduled(t, cs, ns, fmt.Sprintf("%s-%d", prefix, i))
	}
}

// waitScheduledEvents waits for one Scheduled event of each pod
// PREFIX-0 … PREFIX-(n-1).
func waitScheduledEvents(t *testing.T, cs kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		var evs []corev1.Event
		poll(t, "Scheduled event of "+name, func(ctx context.Context) (bool, error) {
			var err error
			evs, err = podEvents(ctx, cs, ns, name, "Scheduled")
			return len(evs) > 0, err
		})
		if len(evs) != 1 || evs[0].Count > 1 {
			t.Errorf("pod %s has Scheduled events %v", name, evs)
		}
	}
}

// getMetrics reads a /metrics page served over plain HTTP.
func getMetrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %s %v", base, resp.Status, err)
	}
	return string(b)
}
