package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestControllerManager_LeaderElection: two `sqlkube controller-manager`
// processes against one `sqlkube server --controllers=-*`: one leads
// (holds the Lease kube-system/kube-controller-manager), the other stands
// by and reconciles nothing; when the leader stops, the other takes over
// within the lease duration and reconciles.
func TestControllerManager_LeaderElection(t *testing.T) {
	const leaseDuration = 6 * time.Second
	bin := kubectls(t)["kubectl"]
	s := startCommand(t, t.TempDir(), "server", "--controllers=-*", "--fake-nodes", "1")
	cs := s.clientset(t)
	ctx := context.Background()
	managers := make([]*server, 2)
	for i := range managers {
		managers[i] = startSqlkube(t, "controller-manager", "--kubeconfig", s.kubeconfig, "--log-level", "debug",
			"--leader-elect-lease-duration="+leaseDuration.String(), "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=500ms")
	}
	acquired := func(m *server) bool {
		return strings.Contains(strings.ToLower(m.logs()), "successfully acquired lease") // client-go 1.37 capitalises it
	}
	holder := func() string {
		l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var first string
	until(t, commandTimeout, "a controller manager holds the Lease", func() (bool, error) {
		first = holder()
		return first != "" && (acquired(managers[0]) || acquired(managers[1])), nil
	})
	if acquired(managers[0]) && acquired(managers[1]) {
		t.Fatal("both controller managers acquired the Lease")
	}
	leader, standby := managers[0], managers[1]
	if acquired(standby) {
		leader, standby = standby, leader
	}

	// A Deployment made while both run: one ReplicaSet, 3 pods.
	s.waitKubectl(t, bin, "serviceaccount/default", "get", "serviceaccount", "default", "-o", "name")
	s.mustKubectl(t, bin, "create", "deployment", "before", "--image=nginx", "--replicas=3")
	s.mustKubectl(t, bin, "rollout", "status", "deployment/before", "--timeout=60s")
	s.waitKubectl(t, bin, "Running Running Running", "get", "pods", "-l", "app=before", "-o", "jsonpath={.items[*].status.phase}")

	stopped := time.Now()
	leader.stop(t)
	var second string
	until(t, commandTimeout, "the standby takes the Lease", func() (bool, error) {
		second = holder()
		return second != "" && second != first && acquired(standby), nil
	})
	took := time.Since(stopped)
	t.Logf("the standby took over %v after the leader was sent SIGTERM", took)
	if took > leaseDuration {
		t.Errorf("the standby took over %v after the leader stopped, more than the lease duration %v", took, leaseDuration)
	}

	s.mustKubectl(t, bin, "create", "deployment", "after", "--image=nginx", "--replicas=2")
	s.mustKubectl(t, bin, "rollout", "status", "deployment/after", "--timeout=60s")
	s.waitKubectl(t, bin, "Running Running", "get", "pods", "-l", "app=after", "-o", "jsonpath={.items[*].status.phase}")
	for app, pods := range map[string]int{"before": 3, "after": 2} {
		if out := s.mustKubectl(t, bin, "get", "replicasets", "-l", "app="+app, "-o", "name"); len(strings.Fields(out)) != 1 {
			t.Errorf("deployment %s: ReplicaSets %q, want one", app, out)
		}
		if out := s.mustKubectl(t, bin, "get", "pods", "-l", "app="+app, "-o", "name"); len(strings.Fields(out)) != pods {
			t.Errorf("deployment %s: pods %q, want %d", app, out, pods)
		}
	}
}
