package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// retryAfter is how soon a failed node or pod sync is tried again.
const retryAfter = time.Second

// syncNode registers node name if it is not, then renews its Lease and
// writes its status when they are due, and queues it for the next time.
func (s *Simulator) syncNode(ctx context.Context, name string) {
	n := s.nodes[name]
	if n.first.CompareAndSwap(true, false) {
		defer func() { <-s.regSlots }()
	}
	if d := n.deletedUID.Swap(nil); d != nil && *d == n.uid {
		n.registered, n.lease = false, nil
	}
	if !n.registered {
		if err := s.register(ctx, n); err != nil {
			s.nodeError(ctx, n, "register", err)
			return
		}
		if s.registered.Add(1) == int64(s.opts.Count) {
			close(s.allRegistered)
			s.opts.Logger.Info().Int("nodes", s.opts.Count).Msg("simulated nodes registered")
		}
		// The first renewals spread over an interval, so that the
		// heartbeats of nodes registered together do not come in bursts.
		s.nodeQueue.AddAfter(name, time.Duration(float64(s.opts.RenewInterval)*(0.5+0.5*spread(n.index))))
		return
	}
	now := time.Now()
	if dirty := n.statusDirty.Load(); dirty || s.statusDue(n, now) {
		if err := s.writeNodeStatus(ctx, n, now, dirty); err != nil {
			s.nodeError(ctx, n, "write status of", err)
			return
		}
	}
	if s.leaseDue(n, now) {
		if err := s.renewLease(ctx, n, now); err != nil {
			s.nodeError(ctx, n, "renew lease of", err)
			return
		}
	}
	s.nodeQueue.AddAfter(name, time.Until(s.nextWake(n)))
}

// The heartbeats of a node are due on ticks (a 40th of the renew
// interval): the renewals of nodes due close together go out together,
// and the simulator wakes up 40 times per interval, not once per node.
// A due time is rounded down to its tick both when the node is queued and
// when it is checked, so a node woken for a heartbeat always sends it
// (checking the exact time would find it not yet due and queue the node
// again at once, until the time passed).
func (s *Simulator) tick() time.Duration { return s.opts.RenewInterval / 40 }

// statusDue: the periodic status write (every StatusInterval) is due.
func (s *Simulator) statusDue(n *node, now time.Time) bool {
	return !now.Before(n.lastStatus.Add(s.opts.StatusInterval).Truncate(s.tick()))
}

// leaseDue: the Lease is missing or due for renewal. A renewal up to a
// tenth of the interval early is allowed, so a node woken early for its
// status renews its Lease in the same visit.
func (s *Simulator) leaseDue(n *node, now time.Time) bool {
	return n.lease == nil || now.Sub(n.lease.Spec.RenewTime.Time) >= s.opts.RenewInterval-s.opts.RenewInterval/10
}

// nextWake is when a registered node next has a heartbeat due.
func (s *Simulator) nextWake(n *node) time.Time {
	next := n.lease.Spec.RenewTime.Add(s.opts.RenewInterval)
	if st := n.lastStatus.Add(s.opts.StatusInterval); st.Before(next) {
		next = st
	}
	return next.Truncate(s.tick())
}

func (s *Simulator) nodeError(ctx context.Context, n *node, what string, err error) {
	if ctx.Err() == nil {
		s.opts.Logger.Warn().Err(err).Str("node", n.name).Msgf("cannot %s node", what)
		s.nodeQueue.AddAfter(n.name, retryAfter)
	}
}

// spread maps i to [0, 1) evenly for any count (the golden ratio's
// fractional multiples).
func spread(i int) float64 {
	const phi = 0.6180339887498949
	x := float64(i) * phi
	return x - float64(int64(x))
}

// register creates n's Node (or adopts an existing one: its pod CIDR
// stays, labels and taints are added) and its Lease.
func (s *Simulator) register(ctx context.Context, n *node) error {
	nodes := s.opts.Client.CoreV1().Nodes()
	now := time.Now()
	want := s.nodeObject(n, now)
	got, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	switch {
	case err == nil:
	case apierrors.IsAlreadyExists(err):
		if got, err = s.adopt(ctx, n); err != nil {
			return err
		}
		n.statusDirty.Store(true)
	default:
		return err
	}
	n.uid = got.UID
	if err := n.setPodCIDR(got.Spec.PodCIDR); err != nil {
		return err
	}
	n.registered, n.lease = true, nil
	if n.statusDirty.Load() {
		if err := s.writeNodeStatus(ctx, n, now, true); err != nil {
			return err
		}
	}
	// The periodic status writes of nodes registered together spread
	// over an interval too: as if written up to one interval ago.
	n.lastStatus = now.Add(-time.Duration(spread(n.index) * float64(s.opts.StatusInterval)))
	return s.renewLease(ctx, n, now)
}

// adopt brings an existing Node of ours up to date: our labels and
// taints.
func (s *Simulator) adopt(ctx context.Context, n *node) (*corev1.Node, error) {
	nodes := s.opts.Client.CoreV1().Nodes()
	old, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	upd := old.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	for k, v := range s.nodeLabels(n) {
		upd.Labels[k] = v
	}
	for _, t := range s.opts.Taints {
		if !hasTaint(upd.Spec.Taints, t) {
			upd.Spec.Taints = append(upd.Spec.Taints, t)
		}
	}
	return nodes.Update(ctx, upd, metav1.UpdateOptions{})
}

func hasTaint(ts []corev1.Taint, t corev1.Taint) bool {
	for _, o := range ts {
		if o.Key == t.Key && o.Effect == t.Effect {
			return true
		}
	}
	return false
}

// setPodCIDR makes cidr (the Node's spec.podCIDR, which the cluster's
// node IPAM assigns) where n's pods get their addresses, unless n has
// given out an address already: pods keep theirs. An empty cidr changes
// nothing.
func (n *node) setPodCIDR(cidr string) error {
	if cidr == "" {
		return nil
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || p.Bits() < 24 || p.Bits() > 30 {
		return fmt.Errorf("node %s: pod CIDR %q: want an IPv4 /24 to /30", n.name, cidr)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if slices.Contains(n.usedIPs[:], true) {
		return nil
	}
	n.podCIDR = p.Masked()
	return nil
}

func (s *Simulator) nodeLabels(n *node) map[string]string {
	l := map[string]string{
		corev1.LabelHostname:           n.name,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		corev1.LabelInstanceTypeStable: InstanceTypeValue,
		LabelType:                      LabelTypeValue,
	}
	for k, v := range s.opts.Labels {
		l[k] = v
	}
	return l
}

func (s *Simulator) nodeObject(n *node, now time.Time) *corev1.Node {
	// No spec.podCIDR: that is the cluster's node IPAM's to give (a
	// controller manager refuses to start on Nodes whose pod CIDRs lie
	// outside its --cluster-cidr). Until it gives one, pods get addresses
	// from the node's own /24 of Options.PodCIDRRange.
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name, Labels: s.nodeLabels(n),
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec:   corev1.NodeSpec{Taints: append([]corev1.Taint(nil), s.opts.Taints...)},
		Status: s.nodeStatus(n, now, nil),
	}
}

// nodeStatus is what n reports at now; transition times of conditions
// that keep their status come from old.
func (s *Simulator) nodeStatus(n *node, now time.Time, old *corev1.Node) corev1.NodeStatus {
	t := metav1.NewTime(now)
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: typ, Status: st, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: t}
		if old != nil {
			for _, o := range old.Status.Conditions {
				if o.Type == typ && o.Status == st {
					c.LastTransitionTime = o.LastTransitionTime
				}
			}
		}
		return c
	}
	id := nodeID(n.name)
	return corev1.NodeStatus{
		Capacity:    s.opts.Capacity.DeepCopy(),
		Allocatable: s.opts.Capacity.DeepCopy(),
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status (simulated)"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.ip.String()},
			{Type: corev1.NodeHostName, Address: n.name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: id, SystemUUID: id, BootID: id,
			KernelVersion: "6.1.0-fake", OSImage: "sqlkube fake node",
			ContainerRuntimeVersion: "fake://0.0.0",
			KubeletVersion:          s.kubeletVersion,
			OperatingSystem:         "linux", Architecture: "amd64",
		},
	}
}

// nodeID is a stable machine ID for a node name.
func nodeID(name string) string {
	h := fnv.New128a()
	h.Write([]byte(name))
	return fmt.Sprintf("%x", h.Sum(nil))
}

// writeNodeStatus patches n's status (nodes/status, strategic merge: the
// conditions merge by type): all of it, or only the conditions (their
// heartbeat times) when nothing else changed, as kubelets do.
func (s *Simulator) writeNodeStatus(ctx context.Context, n *node, now time.Time, all bool) error {
	old, _ := s.nodeList.Get(n.name)
	var status any = s.nodeStatus(n, now, old)
	if !all {
		status = map[string]any{"conditions": s.nodeStatus(n, now, old).Conditions}
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if _, err := s.opts.Client.CoreV1().Nodes().Patch(ctx, n.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return err
	}
	n.statusDirty.Store(false)
	n.lastStatus = now
	return nil
}

// renewLease renews n's Lease as a kubelet does: an update of the last
// copy it wrote; created when missing, read again after a conflict.
func (s *Simulator) renewLease(ctx context.Context, n *node, now time.Time) error {
	leases := s.opts.Client.CoordinationV1().Leases(NodeLeaseNamespace)
	renew := metav1.NewMicroTime(now)
	if n.lease == nil {
		want := s.leaseObject(n, renew)
		got, err := leases.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			if got, err = leases.Get(ctx, n.name, metav1.GetOptions{}); err == nil {
				want.ResourceVersion = got.ResourceVersion
				got, err = leases.Update(ctx, want, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return err
		}
		n.lease = keepLease(got)
		return nil
	}
	l := n.lease.DeepCopy()
	l.Spec.RenewTime = &renew
	got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		n.lease = nil // read (or create) it again next time
		return err
	}
	n.lease = keepLease(got)
	return nil
}

// keepLease drops what the next renewal need not send: an update without
// managedFields keeps the stored ones (the API server takes them from the
// live object), so each renewal encodes, sends and keeps less.
func keepLease(l *coordv1.Lease) *coordv1.Lease {
	l.ManagedFields = nil
	return l
}

func (s *Simulator) leaseObject(n *node, renew metav1.MicroTime) *coordv1.Lease {
	holder := n.name
	secs := max(int32(s.opts.LeaseDuration/time.Second), 1)
	return &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name, Namespace: NodeLeaseNamespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.name, UID: n.uid}},
		},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &renew},
	}
}
