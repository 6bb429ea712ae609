// Package faketest checks simulated nodes (package fake) against a running
// API server: the same tests run on `sqlkube server` in-process,
// `sqlkube apiserver` over HTTPS, or any Kubernetes API server.
package faketest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	batchv1 "k8s.io/api/batch/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/node/fake"
)

// Timeout bounds every wait of the suite.
const Timeout = 30 * time.Second

// renewInterval is the suite's heartbeat, short so that renewals are seen
// quickly.
const renewInterval = 200 * time.Millisecond

// Run registers two simulated nodes named prefix0 and prefix1 with cfg's
// credentials and checks them and their pods: registration, Lease
// renewal, pods running, finishing and deleted, and that stopping the
// simulator stops the heartbeats. admin (may be cfg) creates the test's
// namespace and objects.
func Run(t *testing.T, cfg, admin *rest.Config, prefix string) {
	ctx := context.Background()
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cs := kubernetes.NewForConfigOrDie(cfg)
	ac := kubernetes.NewForConfigOrDie(admin)
	ns := prefix + "suite"
	if _, err := ac.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount admission plugin wants it; no controller may run.
	_, err := ac.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	taint := corev1.Taint{Key: "dedicated", Value: "sim", Effect: corev1.TaintEffectNoSchedule}
	capacity, _ := fake.ParseCapacity("cpu=8,memory=16Gi,pods=50")
	sim, err := fake.New(fake.Options{
		Client: cs, Logger: zerolog.Nop(), Count: 2, NamePrefix: prefix,
		Labels: map[string]string{"zone": "a"}, Taints: []corev1.Taint{taint}, Capacity: capacity,
		RenewInterval: renewInterval, NodeWorkers: 2, PodWorkers: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	simCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sim.Run(simCtx) }()
	stopped := false
	stopSim := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(stopSim)
	node0 := prefix + "0"

	t.Run("Registration", func(t *testing.T) {
		version, err := ac.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		cidrs := map[string]bool{}
		for _, name := range sim.NodeNames() {
			n := waitNode(t, ac, name, func(n *corev1.Node) bool { return ready(n) })
			if got := n.Status.NodeInfo.KubeletVersion; got != version.GitVersion {
				t.Errorf("%s: kubeletVersion %q, want the server's %q", name, got, version.GitVersion)
			}
			for k, v := range map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				corev1.LabelInstanceTypeStable: "fake", "type": "fake", "zone": "a",
			} {
				if n.Labels[k] != v {
					t.Errorf("%s: label %s=%q, want %q", name, k, n.Labels[k], v)
				}
			}
			// TaintNodesByCondition admits every new Node with the
			// not-ready taint, which only the node-lifecycle controller
			// lifts: on an API server without controllers it stays.
			var taints []corev1.Taint
			for _, tn := range n.Spec.Taints {
				if tn.Key != corev1.TaintNodeNotReady {
					taints = append(taints, tn)
				}
			}
			if len(taints) != 1 || taints[0].Key != taint.Key || taints[0].Value != taint.Value || taints[0].Effect != taint.Effect {
				t.Errorf("%s: taints %+v", name, n.Spec.Taints)
			}
			if c := n.Status.Capacity; c.Cpu().String() != "8" || c.Memory().String() != "16Gi" || c.Pods().String() != "50" {
				t.Errorf("%s: capacity %v", name, c)
			}
			if a := n.Status.Allocatable; a.Cpu().String() != "8" || a.Pods().String() != "50" {
				t.Errorf("%s: allocatable %v", name, a)
			}
			addrs := map[corev1.NodeAddressType]string{}
			for _, a := range n.Status.Addresses {
				addrs[a.Type] = a.Address
			}
			if ip, err := netip.ParseAddr(addrs[corev1.NodeInternalIP]); err != nil || ip.As4()[0] != 10 || addrs[corev1.NodeHostName] != name {
				t.Errorf("%s: addresses %v", name, n.Status.Addresses)
			}
			// spec.podCIDR is the cluster's node IPAM's to give: none
			// where no controller manager runs, else a /24 of its own.
			if n.Spec.PodCIDR != "" {
				p, err := netip.ParsePrefix(n.Spec.PodCIDR)
				if err != nil || p.Bits() != 24 || cidrs[n.Spec.PodCIDR] {
					t.Errorf("%s: podCIDR %q (not a /24 of its own)", name, n.Spec.PodCIDR)
				}
				cidrs[n.Spec.PodCIDR] = true
			}
			want := map[corev1.NodeConditionType]corev1.ConditionStatus{
				corev1.NodeReady: corev1.ConditionTrue, corev1.NodeMemoryPressure: corev1.ConditionFalse,
				corev1.NodeDiskPressure: corev1.ConditionFalse, corev1.NodePIDPressure: corev1.ConditionFalse,
			}
			for _, c := range n.Status.Conditions {
				if want[c.Type] == c.Status && !c.LastHeartbeatTime.IsZero() {
					delete(want, c.Type)
				}
			}
			if len(want) > 0 {
				t.Errorf("%s: conditions %+v lack %v", name, n.Status.Conditions, want)
			}
			if i := n.Status.NodeInfo; i.OperatingSystem != "linux" || i.Architecture != "amd64" || i.MachineID == "" {
				t.Errorf("%s: nodeInfo %+v", name, i)
			}
		}
	})

	t.Run("LeaseRenewal", func(t *testing.T) {
		n, err := ac.CoreV1().Nodes().Get(ctx, node0, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first := waitLease(t, ac, node0, func(*coordv1.Lease) bool { return true })
		if h := first.Spec.HolderIdentity; h == nil || *h != node0 {
			t.Errorf("holderIdentity %v", h)
		}
		if d := first.Spec.LeaseDurationSeconds; d == nil || *d != 40 {
			t.Errorf("leaseDurationSeconds %v, want 40", d)
		}
		if o := first.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].Name != node0 || o[0].UID != n.UID {
			t.Errorf("ownerReferences %+v, want the Node %s", o, n.UID)
		}
		// Two renewals later: the renewals send no managedFields, and the
		// server keeps the stored ones.
		second := waitLease(t, ac, node0, func(l *coordv1.Lease) bool { return l.Spec.RenewTime.After(first.Spec.RenewTime.Time) })
		renewed := waitLease(t, ac, node0, func(l *coordv1.Lease) bool { return l.Spec.RenewTime.After(second.Spec.RenewTime.Time) })
		if len(renewed.ManagedFields) == 0 || renewed.ManagedFields[0].Manager == "" {
			t.Errorf("renewed lease's managedFields: %+v", renewed.ManagedFields)
		}
	})

	t.Run("PodRuns", func(t *testing.T) {
		pod := newPod("web", node0)
		pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36"}}
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "side", Image: "busybox:1.36",
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}})
		createPod(t, ac, ns, pod)
		got := waitPod(t, ac, ns, "web", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		n, err := ac.CoreV1().Nodes().Get(ctx, node0, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The address comes from the node's spec.podCIDR once the cluster
		// gave it one before the pod started, else from the simulator's
		// own range.
		ranges := []netip.Prefix{netip.MustParsePrefix(fake.DefaultPodCIDRRange)}
		if n.Spec.PodCIDR != "" {
			ranges = append(ranges, netip.MustParsePrefix(n.Spec.PodCIDR))
		}
		ip, err := netip.ParseAddr(got.Status.PodIP)
		if err != nil || !slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Contains(ip) }) || len(got.Status.PodIPs) != 1 || got.Status.PodIPs[0].IP != got.Status.PodIP {
			t.Errorf("podIP %q podIPs %v, want one from %v", got.Status.PodIP, got.Status.PodIPs, ranges)
		}
		if got.Status.HostIP != n.Status.Addresses[0].Address || got.Status.StartTime == nil {
			t.Errorf("hostIP %q (node %v), startTime %v", got.Status.HostIP, n.Status.Addresses, got.Status.StartTime)
		}
		conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
		for _, c := range got.Status.Conditions {
			conds[c.Type] = c.Status
		}
		for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			if conds[c] != corev1.ConditionTrue {
				t.Errorf("condition %s is %q", c, conds[c])
			}
		}
		if cs := got.Status.ContainerStatuses; len(cs) != 2 || cs[0].State.Running == nil || !cs[0].Ready || !cs[1].Ready {
			t.Errorf("containerStatuses %+v", cs)
		}
		if cs := got.Status.InitContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.Reason != "Completed" || cs[0].State.Terminated.ExitCode != 0 {
			t.Errorf("initContainerStatuses %+v", cs)
		}

		// A second pod on the node gets another IP; a host network pod
		// the node's.
		createPod(t, ac, ns, newPod("web2", node0))
		host := newPod("host", node0)
		host.Spec.HostNetwork = true
		createPod(t, ac, ns, host)
		web2 := waitPod(t, ac, ns, "web2", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if web2.Status.PodIP == got.Status.PodIP {
			t.Errorf("two pods share IP %s", web2.Status.PodIP)
		}
		waitPod(t, ac, ns, "host", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Status.PodIP == n.Status.Addresses[0].Address
		})
	})

	t.Run("SucceedAfter", func(t *testing.T) {
		pod := newPod("ok", node0)
		pod.Annotations = map[string]string{fake.AnnotationSucceedAfter: "100ms"}
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		createPod(t, ac, ns, pod)
		got := waitPod(t, ac, ns, "ok", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
			t.Errorf("container state %+v", got.Status.ContainerStatuses[0].State)
		}
	})

	t.Run("FailAfter", func(t *testing.T) {
		pod := newPod("bad", prefix+"1")
		pod.Annotations = map[string]string{fake.AnnotationFailAfter: "100ms"}
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		createPod(t, ac, ns, pod)
		got := waitPod(t, ac, ns, "bad", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 1 || term.Reason != "Error" {
			t.Errorf("container state %+v", got.Status.ContainerStatuses[0].State)
		}
		// With restartPolicy Always the container restarts instead.
		again := newPod("crashloop", prefix+"1")
		again.Annotations = map[string]string{fake.AnnotationFailAfter: "100ms"}
		createPod(t, ac, ns, again)
		got = waitPod(t, ac, ns, "crashloop", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
		if c := got.Status.ContainerStatuses[0]; got.Status.Phase != corev1.PodRunning || c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode != 1 {
			t.Errorf("restarted pod: phase %s, container %+v", got.Status.Phase, c)
		}
	})

	t.Run("JobPodSucceeds", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "once"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}},
			}}},
		}
		job, err := ac.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := newPod("once-x", node0)
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		createPod(t, ac, ns, pod)
		waitPod(t, ac, ns, "once-x", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	})

	t.Run("DeletionConfirmed", func(t *testing.T) {
		createPod(t, ac, ns, newPod("gone", node0))
		waitPod(t, ac, ns, "gone", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		// A graceful delete (30 s by default) ends at once: the node
		// confirms it.
		if err := ac.CoreV1().Pods(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
			_, err := ac.CoreV1().Pods(ns).Get(ctx, "gone", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("the deleted pod is still there: %v", err)
		}
	})

	t.Run("StopEndsHeartbeats", func(t *testing.T) {
		stopSim()
		// A renewal sent just before the stop may still land; one made
		// after it would carry a later renewTime (the simulator sets it
		// when it writes). Absence can only be seen by waiting: ten
		// intervals.
		stoppedAt := time.Now()
		time.Sleep(10 * renewInterval)
		now := waitLease(t, ac, node0, func(*coordv1.Lease) bool { return true })
		if now.Spec.RenewTime.After(stoppedAt) {
			t.Errorf("lease renewed after stop (at %v): %v", stoppedAt, now.Spec.RenewTime)
		}
		if _, err := ac.CoreV1().Nodes().Get(ctx, node0, metav1.GetOptions{}); err != nil {
			t.Errorf("the Node is gone after stop: %v", err)
		}
	})
}

func newPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27"}},
		},
	}
}

func createPod(t *testing.T, cs kubernetes.Interface, ns string, pod *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitFor polls get until ok holds for what it returns.
func waitFor[T any](t *testing.T, what string, get func(context.Context) (T, error), ok func(T) bool) T {
	t.Helper()
	var last T
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
		v, err := get(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = v
		return ok(v), nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %+v, error %v)", what, err, last, lastErr)
	}
	return last
}

func waitNode(t *testing.T, cs kubernetes.Interface, name string, ok func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	return waitFor(t, "node "+name, func(ctx context.Context) (*corev1.Node, error) {
		return cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}, ok)
}

func waitLease(t *testing.T, cs kubernetes.Interface, name string, ok func(*coordv1.Lease) bool) *coordv1.Lease {
	t.Helper()
	return waitFor(t, "lease "+name, func(ctx context.Context) (*coordv1.Lease, error) {
		return cs.CoordinationV1().Leases(fake.NodeLeaseNamespace).Get(ctx, name, metav1.GetOptions{})
	}, ok)
}

func waitPod(t *testing.T, cs kubernetes.Interface, ns, name string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	return waitFor(t, fmt.Sprintf("pod %s/%s", ns, name), func(ctx context.Context) (*corev1.Pod, error) {
		return cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	}, ok)
}
