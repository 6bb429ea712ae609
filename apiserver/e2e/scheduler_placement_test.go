package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const zoneLabel = "topology.kubernetes.io/zone"

// twoProfiles is a KubeSchedulerConfiguration with a second profile that
// packs nodes (MostAllocated) beside the default one.
const twoProfiles = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: packing-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - {name: cpu, weight: 1}
        - {name: memory, weight: 1}
`

// TestScheduler_Placement: on `sqlkube server` whose scheduler has two
// profiles (--kube-scheduler-arg=--config=FILE), over three simulated
// nodes in zones a, b and c (b tainted PreferNoSchedule, c NoSchedule),
// kube-scheduler's placement rules hold: nodeSelector, node affinity,
// taints and tolerations, pod anti-affinity, topology spread, host ports;
// pods choose their profile by schedulerName, and a pod naming an unknown
// scheduler waits without a FailedScheduling loop.
func TestScheduler_Placement(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "scheduler.yaml")
	writeFile(t, config, twoProfiles)
	s := startCommand(t, filepath.Join(dir, "data"), "server", "--kube-scheduler-arg=--config="+config)
	cs := s.clientset(t)
	startFakeNodes(t, s, cs, "pl-a-", 1, "--node-labels", zoneLabel+"=a,disk=ssd")
	startFakeNodes(t, s, cs, "pl-b-", 1, "--node-labels", zoneLabel+"=b,disk=hdd", "--node-taints", "soft=yes:PreferNoSchedule")
	startFakeNodes(t, s, cs, "pl-c-", 1, "--node-labels", zoneLabel+"=c", "--node-taints", "dedicated=gpu:NoSchedule")

	// Created first, so the scheduler has had the whole test to loop on it.
	orphanNS := namespace(t, cs, "unknown-scheduler")
	orphan := testPod("orphan", "")
	orphan.Spec.SchedulerName = "no-such-scheduler"
	createPod(t, cs, orphanNS, orphan)

	t.Run("NodeSelector", func(t *testing.T) {
		ns := namespace(t, cs, "node-selector")
		for name, want := range map[string]string{"ssd": "pl-a-0", "hdd": "pl-b-0"} {
			p := testPod(name, "")
			p.Spec.NodeSelector = map[string]string{"disk": name}
			createPod(t, cs, ns, p)
			if got := waitScheduled(t, cs, ns, name); got != want {
				t.Errorf("pod with nodeSelector disk=%s on %s, want %s", name, got, want)
			}
		}
		p := testPod("nowhere", "")
		p.Spec.NodeSelector = map[string]string{"disk": "nvme"}
		createPod(t, cs, ns, p)
		waitFailedScheduling(t, cs, ns, "nowhere", regexp.MustCompile(`^0/3 nodes are available: 1 node\(s\) had untolerated taint\(s\), 2 node\(s\) didn't match Pod's node affinity/selector\.`))
	})

	t.Run("NodeAffinity", func(t *testing.T) {
		ns := namespace(t, cs, "node-affinity")
		// Required: zone b or c, and c's taint is not tolerated.
		p := testPod("required", "")
		p.Spec.Affinity = requiredZones("b", "c")
		createPod(t, cs, ns, p)
		if got := waitScheduled(t, cs, ns, "required"); got != "pl-b-0" {
			t.Errorf("pod requiring zone b or c (c tainted) on %s, want pl-b-0", got)
		}
		p = testPod("required-c", "")
		p.Spec.Affinity = requiredZones("c")
		createPod(t, cs, ns, p)
		waitFailedScheduling(t, cs, ns, "required-c", regexp.MustCompile(`^0/3 nodes are available: 1 node\(s\) had untolerated taint\(s\), 2 node\(s\) didn't match Pod's node affinity/selector\.`))
		// Preferred: zone c, whose taint it tolerates.
		p = testPod("preferred", "")
		p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight:     100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zoneLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"c"}}}},
			}},
		}}
		createPod(t, cs, ns, p)
		if got := waitScheduled(t, cs, ns, "preferred"); got != "pl-c-0" {
			t.Errorf("pod preferring zone c on %s, want pl-c-0", got)
		}
	})

	t.Run("Taints", func(t *testing.T) {
		ns := namespace(t, cs, "taints")
		// NoSchedule keeps them off c; PreferNoSchedule off b while a has room.
		for i := range 3 {
			createPod(t, cs, ns, testPod(fmt.Sprintf("plain-%d", i), ""))
		}
		for i := range 3 {
			if got := waitScheduled(t, cs, ns, fmt.Sprintf("plain-%d", i)); got != "pl-a-0" {
				t.Errorf("pod plain-%d without tolerations on %s, want pl-a-0", i, got)
			}
		}
		p := testPod("tolerant", "")
		p.Spec.NodeSelector = map[string]string{zoneLabel: "c"}
		p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		createPod(t, cs, ns, p)
		if got := waitScheduled(t, cs, ns, "tolerant"); got != "pl-c-0" {
			t.Errorf("pod tolerating dedicated on %s, want pl-c-0", got)
		}
	})

	t.Run("PodAntiAffinity", func(t *testing.T) {
		ns := namespace(t, cs, "anti-affinity")
		labels := map[string]string{"app": "anti"}
		tmpl := testPod("", "")
		tmpl.Labels = labels
		tmpl.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		tmpl.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname,
			}},
		}}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "anti"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](3),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
			},
		}
		if _, err := cs.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var nodes map[string]string
		poll(t, "3 replicas of deployment anti scheduled", func(context.Context) (bool, error) {
			nodes = podNodes(t, cs, ns)
			return len(nodes) == 3 && countBound(nodes) == 3, nil
		})
		if perNode := countPerNode(nodes); len(perNode) != 3 {
			t.Errorf("3 replicas with required anti-affinity on %v, want one per node", nodes)
		}
		// A fourth fits nowhere.
		p := testPod("fourth", "")
		p.Labels, p.Spec.Tolerations, p.Spec.Affinity = labels, tmpl.Spec.Tolerations, tmpl.Spec.Affinity
		createPod(t, cs, ns, p)
		waitFailedScheduling(t, cs, ns, "fourth", regexp.MustCompile(`^0/3 nodes are available: 3 node\(s\) didn't match pod anti-affinity rules\.`))
	})

	t.Run("TopologySpread", func(t *testing.T) {
		ns := namespace(t, cs, "spread")
		labels := map[string]string{"app": "spread"}
		for i := range 6 {
			p := testPod(fmt.Sprintf("spread-%d", i), "")
			p.Labels = labels
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: zoneLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
			}}
			createPod(t, cs, ns, p)
		}
		var nodes map[string]string
		poll(t, "6 spread pods scheduled", func(context.Context) (bool, error) {
			nodes = podNodes(t, cs, ns)
			return countBound(nodes) == 6, nil
		})
		for _, node := range []string{"pl-a-0", "pl-b-0", "pl-c-0"} {
			if n := countPerNode(nodes)[node]; n != 2 {
				t.Errorf("%d of 6 pods spread over zones with maxSkew 1 on %s, want 2: %v", n, node, nodes)
			}
		}
	})

	t.Run("HostPorts", func(t *testing.T) {
		ns := namespace(t, cs, "host-ports")
		for i := range 4 {
			p := testPod(fmt.Sprintf("port-%d", i), "")
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
			createPod(t, cs, ns, p)
		}
		var nodes map[string]string
		poll(t, "3 pods with hostPort 8080 scheduled", func(context.Context) (bool, error) {
			nodes = podNodes(t, cs, ns)
			return countBound(nodes) == 3, nil
		})
		if perNode := countPerNode(nodes); len(perNode) != 3 {
			t.Errorf("pods with hostPort 8080 share a node: %v", nodes)
		}
		for name, node := range nodes {
			if node == "" {
				waitFailedScheduling(t, cs, ns, name, regexp.MustCompile(`3 node\(s\) didn't have free ports for the requested pod ports`))
			}
		}
	})

	t.Run("Profiles", func(t *testing.T) {
		ns := namespace(t, cs, "profiles")
		for _, name := range []string{"default-scheduler", "packing-scheduler"} {
			p := testPod(name, "")
			p.Spec.SchedulerName = name
			createPod(t, cs, ns, p)
			waitScheduled(t, cs, ns, name)
			var ev corev1.Event
			poll(t, "Scheduled event of "+name, func(ctx context.Context) (bool, error) {
				evs, err := podEvents(ctx, cs, ns, name, "Scheduled")
				if len(evs) > 0 {
					ev = evs[0]
				}
				return len(evs) > 0, err
			})
			if ev.ReportingController != name && ev.Source.Component != name {
				t.Errorf("Scheduled event of a pod of %s: reportingController %q, source %q", name, ev.ReportingController, ev.Source.Component)
			}
		}
		// The pod of an unknown scheduler was left alone all along.
		p, err := cs.CoreV1().Pods(orphanNS).Get(context.Background(), "orphan", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" || len(p.Status.Conditions) != 0 {
			t.Errorf("pod of an unknown scheduler: node %q, conditions %v", p.Spec.NodeName, p.Status.Conditions)
		}
		if evs, err := podEvents(context.Background(), cs, orphanNS, "orphan", ""); err != nil || len(evs) != 0 {
			t.Errorf("pod of an unknown scheduler has events %v (%v)", evs, err)
		}
	})
}

func requiredZones(zones ...string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zoneLabel, Operator: corev1.NodeSelectorOpIn, Values: zones}},
		}}},
	}}
}

func countBound(nodes map[string]string) int {
	n := 0
	for _, node := range nodes {
		if node != "" {
			n++
		}
	}
	return n
}

// countPerNode counts bound pods per node.
func countPerNode(nodes map[string]string) map[string]int {
	out := map[string]int{}
	for _, node := range nodes {
		if node != "" {
			out[node]++
		}
	}
	return out
}
