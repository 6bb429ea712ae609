package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// preferNode is a Deployment of replicas pods that prefer node (so they
// go there while it is schedulable, elsewhere once it is not), tolerate
// an unreachable or not-ready node for 2s, and mount an emptyDir.
func preferNode(ns, name, node string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  replicas: %[4]d
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference: {matchFields: [{key: metadata.name, operator: In, values: [%[3]s]}]}
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      containers: [{name: c, image: nginx, volumeMounts: [{name: scratch, mountPath: /scratch}]}]
      volumes: [{name: scratch, emptyDir: {}}]
`, ns, name, node, replicas)
}

// podsOn is "node phase" of each live (not terminating) pod matching
// selector in ns, sorted.
func podsOn(t *testing.T, s *server, ns, selector string) (live []string, all []corev1.Pod) {
	t.Helper()
	list, err := s.clientset(t).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p.Spec.NodeName+" "+string(p.Status.Phase))
		}
	}
	slices.Sort(live)
	return live, list.Items
}

// TestKubectl_NodeHealth: a `sqlkube node --fake` process stopped with
// SIGTERM no longer renews its Lease; Kubernetes' node lifecycle
// controller (grace period shortened to 20s, twice the simulated nodes'
// 10s Lease renew interval) marks it Unknown and taints it unreachable, and the
// taint eviction controller evicts its pods after their 2s toleration;
// their Deployment makes new ones on the node left.
func TestKubectl_NodeHealth(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	s := startCommand(t, t.TempDir(), "server", "--fake-nodes", "1",
		"--kube-controller-manager-arg=--node-monitor-period=1s",
		"--kube-controller-manager-arg=--node-monitor-grace-period=20s")
	doomed := startSqlkube(t, "node", "--fake", "--count", "1", "--name-prefix", "doomed-", "--kubeconfig", s.kubeconfig)
	s.waitKubectl(t, bin, "True", "get", "node", "doomed-0", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	s.waitKubectl(t, bin, "serviceaccount/default", "get", "serviceaccount", "default", "-o", "name")
	s.apply(t, bin, preferNode("default", "web", "doomed-0", 2))
	var before []corev1.Pod
	until(t, commandTimeout, "2 pods running on doomed-0", func() (bool, error) {
		var live []string
		live, before = podsOn(t, s, "default", "app=web")
		return slices.Equal(live, []string{"doomed-0 Running", "doomed-0 Running"}), nil
	})

	doomed.stop(t)
	s.waitKubectl(t, bin, "Unknown", "get", "node", "doomed-0", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	until(t, commandTimeout, "the unreachable NoExecute taint on doomed-0", func() (bool, error) {
		out, err := s.kubectl(t, bin, "get", "node", "doomed-0", "-o", `jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}`)
		return strings.Contains(out, "node.kubernetes.io/unreachable:NoExecute"), err
	})
	if out := s.mustKubectl(t, bin, "get", "nodes", "doomed-0"); !strings.Contains(out, "NotReady") {
		t.Fatalf("get nodes:\n%s", out)
	}
	until(t, commandTimeout, "the pods evicted from doomed-0 and replaced on fake-0", func() (bool, error) {
		live, all := podsOn(t, s, "default", "app=web")
		if !slices.Equal(live, []string{"fake-0 Running", "fake-0 Running"}) {
			return false, nil
		}
		// The evicted pods are deleted; with their node gone, nothing
		// confirms it, so they stay Terminating (as with kubelets).
		for _, old := range before {
			for _, p := range all {
				if p.UID == old.UID && p.DeletionTimestamp == nil {
					return false, fmt.Errorf("pod %s not evicted", p.Name)
				}
			}
		}
		return true, nil
	})
}

// TestKubectl_DrainPDB: the disruption controller keeps a
// PodDisruptionBudget's status, and `kubectl drain` evicts a node's pods
// as far as their budgets allow: all of them under a budget with room,
// none under a budget without (drain times out, the pod stays).
func TestKubectl_DrainPDB(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	s := startCommand(t, t.TempDir(), "server", "--fake-nodes", "2")
	s.waitKubectl(t, bin, "serviceaccount/default", "get", "serviceaccount", "default", "-o", "name")
	s.apply(t, bin, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: default}
spec:
  selector: {matchLabels: {app: ds}}
  template:
    metadata: {labels: {app: ds}}
    spec:
      containers: [{name: c, image: nginx}]
`)
	s.apply(t, bin, preferNode("default", "web", "fake-0", 3))
	until(t, commandTimeout, "3 pods running on fake-0", func() (bool, error) {
		live, _ := podsOn(t, s, "default", "app=web")
		return slices.Equal(live, []string{"fake-0 Running", "fake-0 Running", "fake-0 Running"}), nil
	})
	s.mustKubectl(t, bin, "create", "poddisruptionbudget", "web", "--selector=app=web", "--min-available=2")
	pdbStatus := []string{"get", "pdb", "web", "-o", "jsonpath={.status.currentHealthy} {.status.desiredHealthy} {.status.disruptionsAllowed} {.status.expectedPods}"}
	s.waitKubectl(t, bin, "3 2 1 3", pdbStatus...)

	bounds := watchRollout(t, s.clientset(t), "default", "app=web")
	out := s.mustKubectl(t, bin, "drain", "fake-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s")
	if !strings.Contains(out, "drained") {
		t.Fatalf("drain fake-0:\n%s", out)
	}
	until(t, commandTimeout, "3 pods running on fake-1", func() (bool, error) {
		live, _ := podsOn(t, s, "default", "app=web")
		return slices.Equal(live, []string{"fake-1 Running", "fake-1 Running", "fake-1 Running"}), nil
	})
	if _, minReady, _ := bounds(); minReady < 2 {
		t.Fatalf("drain left %d ready pods of a budget with minAvailable 2", minReady)
	}
	s.waitKubectl(t, bin, "3 2 1 3", pdbStatus...)
	if out := s.mustKubectl(t, bin, "get", "pods", "-l", "app=ds", "--field-selector=spec.nodeName=fake-0", "-o", "jsonpath={.items[*].status.phase}"); out != "Running" {
		t.Fatalf("DaemonSet pod on the drained node: %q", out)
	}
	if out := s.mustKubectl(t, bin, "get", "node", "fake-0", "-o", "jsonpath={.spec.unschedulable}"); out != "true" {
		t.Fatalf("drained node unschedulable: %q", out)
	}

	// A budget that allows no disruption: drain gives up, the pod stays.
	s.mustKubectl(t, bin, "uncordon", "fake-0")
	s.apply(t, bin, preferNode("default", "solo", "fake-0", 1))
	var solo []corev1.Pod
	until(t, commandTimeout, "solo running on fake-0", func() (bool, error) {
		var live []string
		live, solo = podsOn(t, s, "default", "app=solo")
		return slices.Equal(live, []string{"fake-0 Running"}), nil
	})
	s.mustKubectl(t, bin, "create", "poddisruptionbudget", "solo", "--selector=app=solo", "--max-unavailable=0")
	s.waitKubectl(t, bin, "1 1 0", "get", "pdb", "solo", "-o", "jsonpath={.status.currentHealthy} {.status.desiredHealthy} {.status.disruptionsAllowed}")
	_, err := s.kubectl(t, bin, "drain", "fake-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5s")
	if err == nil || !strings.Contains(err.Error(), "disruption budget") {
		t.Fatalf("drain against a budget allowing no disruption: %v", err)
	}
	_, all := podsOn(t, s, "default", "app=solo")
	if len(all) != 1 || all[0].UID != solo[0].UID || all[0].DeletionTimestamp != nil {
		t.Fatalf("solo pod after the failed drain: %d pods, deleting %v", len(all), len(all) == 1 && all[0].DeletionTimestamp != nil)
	}
}
