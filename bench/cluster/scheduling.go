package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SchedulingNamespace holds the pods of the scheduling benchmark.
const SchedulingNamespace = "sched-bench"

// writers is how many clients create nodes and pods at once.
const writers = 16

// CreateNodes creates n Ready nodes bench-0 … bench-(n-1) as
// scheduler_perf's default node (4 CPUs, 32 GiB, 110 pods), each in a zone
// of 10 and with its hostname label.
func CreateNodes(ctx context.Context, cs kubernetes.Interface, n int) error {
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		name, zone := benchNode(i)
		res := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods: resource.MustParse("110"),
		}
		nd := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelTopologyZone: zone,
			}},
			Status: corev1.NodeStatus{
				Capacity: res, Allocatable: res,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
					LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}},
				Phase: corev1.NodeRunning,
			},
		}
		created, err := cs.CoreV1().Nodes().Create(ctx, nd, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// The API server taints a new node not-ready (the
		// TaintNodesByCondition admission plugin) until the node
		// lifecycle controller, which these runs leave out, sees it
		// Ready: do what it would.
		var taints []corev1.Taint
		for _, tt := range created.Spec.Taints {
			if tt.Key != corev1.TaintNodeNotReady {
				taints = append(taints, tt)
			}
		}
		if len(taints) == len(created.Spec.Taints) {
			return nil
		}
		created.Spec.Taints = taints
		_, err = cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

// benchNode is the name and zone of CreateNodes' node i.
func benchNode(i int) (name, zone string) {
	return fmt.Sprintf("bench-%d", i), fmt.Sprintf("zone-%d", i%10)
}

// PodOptions shape the pods of CreatePods.
type PodOptions struct {
	// AntiAffinityGroups, if above 0, labels pod i group=g(i mod groups)
	// and gives it a required anti-affinity to its group on the hostname:
	// no two pods of a group on one node.
	AntiAffinityGroups int
}

// CreatePods creates namespace SchedulingNamespace with its default
// service account, then n unbound pods as scheduler_perf's default pod
// (one container requesting 100m CPU and 500 MiB).
func CreatePods(ctx context.Context, cs kubernetes.Interface, n int, o PodOptions) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SchedulingNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	// No controller runs: the service account admission needs it.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts(SchedulingNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return err
	}
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i)},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false),
				Containers: []corev1.Container{{
					Name: "pause", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("500Mi"),
					}},
				}},
			},
		}
		if g := o.AntiAffinityGroups; g > 0 {
			group := fmt.Sprintf("g%d", i%g)
			p.Labels = map[string]string{"group": group}
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}},
					TopologyKey:   corev1.LabelHostname,
				}},
			}}
		}
		_, err := cs.CoreV1().Pods(SchedulingNamespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
}

// Placement is where a run's pods went: pods per node over every node
// (those left empty count as 0) and per zone (the nodes' topology zone
// label).
type Placement struct {
	NodesUsed              int
	MinPerNode, MaxPerNode int
	MinPerZone, MaxPerZone int
}

// PlacementOf reads the bound pods of namespace ns and the nodes they may
// go to (nodes of them, as CreateNodes names them).
func PlacementOf(ctx context.Context, cs kubernetes.Interface, ns string, nodes int) (Placement, error) {
	var p Placement
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return p, err
	}
	perNode := make(map[string]int, nodes)
	perZone := map[string]int{}
	zoneOf := make(map[string]string, nodes)
	for i := range nodes {
		name, zone := benchNode(i)
		perNode[name], perZone[zone], zoneOf[name] = 0, 0, zone
	}
	for i := range list.Items {
		if n := list.Items[i].Spec.NodeName; n != "" {
			perNode[n]++
			perZone[zoneOf[n]]++
		}
	}
	p.MinPerNode, p.MinPerZone = -1, -1
	for _, c := range perNode {
		if c > 0 {
			p.NodesUsed++
		}
		p.MinPerNode, p.MaxPerNode = minUnset(p.MinPerNode, c), max(p.MaxPerNode, c)
	}
	for _, c := range perZone {
		p.MinPerZone, p.MaxPerZone = minUnset(p.MinPerZone, c), max(p.MaxPerZone, c)
	}
	return p, nil
}

// minUnset is min(a, b), where a of -1 is unset.
func minUnset(a, b int) int {
	if a < 0 {
		return b
	}
	return min(a, b)
}

// parallel runs fn for 0 … n-1 on writers goroutines; the first error
// stops it.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	for range writers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				if err := fn(ctx, i); err != nil {
					first.CompareAndSwap(nil, &err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}
