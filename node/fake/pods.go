package fake

import (
	"context"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// podState is what the simulator remembers of a pod on one of its nodes.
type podState struct {
	uid       types.UID
	firstSeen time.Time
	// startedAt is when its containers last started (zero: not yet).
	startedAt time.Time
	restarts  int32
	ip        netip.Addr
	node      *node
}

func (s *Simulator) podHandler() cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && s.nodes[p.Spec.NodeName] != nil {
			s.podQueue.Add(p.Namespace + "/" + p.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok && s.nodes[p.Spec.NodeName] != nil {
				s.forget(p.Namespace+"/"+p.Name, p.UID)
			}
		},
	}
}

// state returns the simulator's record of pod (a new one for a new UID).
func (s *Simulator) state(key string, pod *corev1.Pod, n *node) *podState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.pods[key]
	if st != nil && st.uid == pod.UID {
		return st
	}
	if st != nil {
		st.node.releaseIP(st.ip)
	}
	st = &podState{uid: pod.UID, firstSeen: time.Now(), node: n}
	s.pods[key] = st
	return st
}

// forget drops the record of a pod that is gone and frees its IP.
func (s *Simulator) forget(key string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.pods[key]; st != nil && (uid == "" || st.uid == uid) {
		st.node.releaseIP(st.ip)
		delete(s.pods, key)
	}
}

// syncPod brings one pod bound to a simulated node along: deleted pods are
// confirmed gone, new ones run once PodStartDelay has passed, running ones
// finish when their annotations or Job say so.
func (s *Simulator) syncPod(ctx context.Context, key string) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := s.podList.Pods(ns).Get(name)
	if err != nil {
		s.forget(key, "")
		return
	}
	n := s.nodes[pod.Spec.NodeName]
	if n == nil {
		return
	}
	if pod.DeletionTimestamp != nil {
		// As a kubelet once the containers have stopped: gone now, and
		// only this pod (not one made since under the same name).
		zero := int64(0)
		err := s.opts.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			s.podError(ctx, key, "delete", err)
		}
		return
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	st := s.state(key, pod, n)
	now := time.Now()
	if st.startedAt.IsZero() {
		if ok, started := runningByUs(pod); ok {
			// Running before this simulator started (or its write was
			// seen before the record): adopt it.
			st.startedAt, st.restarts = started, restartCount(pod)
			if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil && !st.ip.IsValid() {
				s.setIP(key, st, n.reserveIP(ip))
			}
		} else {
			if due := st.firstSeen.Add(s.opts.PodStartDelay); now.Before(due) {
				s.podQueue.AddAfter(key, due.Sub(now))
				return
			}
			s.start(ctx, key, pod, st, now)
			return
		}
	}
	exit, after, ok := outcome(pod)
	if !ok {
		return
	}
	if due := st.startedAt.Add(after); now.Before(due) {
		s.podQueue.AddAfter(key, due.Sub(now))
		return
	}
	s.finish(ctx, key, pod, st, exit, now)
}

func (s *Simulator) podError(ctx context.Context, key, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		s.opts.Logger.Warn().Err(err).Str("pod", key).Msgf("cannot %s pod", what)
	}
	s.podQueue.AddAfter(key, retryAfter/10)
}

// start writes pod's Running status.
func (s *Simulator) start(ctx context.Context, key string, pod *corev1.Pod, st *podState, now time.Time) {
	ip := st.node.ip
	if !usesNodeIP(pod) {
		if !st.ip.IsValid() {
			s.setIP(key, st, st.node.allocateIP())
		}
		if !st.ip.IsValid() {
			s.opts.Logger.Warn().Str("pod", key).Str("node", st.node.name).Msg("no pod IP left on the node")
			s.podQueue.AddAfter(key, 10*retryAfter)
			return
		}
		ip = st.ip
	}
	upd := pod.DeepCopy()
	runningStatus(upd, st.node.ip, ip, now, st.restarts)
	if _, err := s.opts.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		s.podError(ctx, key, "start", err)
		return
	}
	st.startedAt = now
	if _, after, ok := outcome(pod); ok {
		s.podQueue.AddAfter(key, after)
	}
}

// finish ends pod's containers with exit; by its restart policy they
// start again at once (Always, or OnFailure after a failure), or the pod
// ends (Succeeded or Failed).
func (s *Simulator) finish(ctx context.Context, key string, pod *corev1.Pod, st *podState, exit int32, now time.Time) {
	upd := pod.DeepCopy()
	restart := pod.Spec.RestartPolicy == corev1.RestartPolicyAlways || (pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && exit != 0)
	if restart {
		restartedStatus(upd, exit, st.startedAt, now)
	} else {
		terminatedStatus(upd, exit, st.startedAt, now)
	}
	if _, err := s.opts.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		s.podError(ctx, key, "finish", err)
		return
	}
	if restart {
		st.startedAt = now
		st.restarts++
		if _, after, ok := outcome(pod); ok {
			s.podQueue.AddAfter(key, after)
		}
	}
}

// outcome is how pod's containers end: exit code and run time, from its
// annotations, or 0 after JobPodRuntime for a Job's pod; ok is false for
// pods that run until deleted.
func outcome(pod *corev1.Pod) (exit int32, after time.Duration, ok bool) {
	if v, found := pod.Annotations[AnnotationFailAfter]; found {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return 1, d, true
		}
	}
	if v, found := pod.Annotations[AnnotationSucceedAfter]; found {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return 0, d, true
		}
	}
	for _, o := range pod.OwnerReferences {
		if o.Kind == "Job" && o.Controller != nil && *o.Controller {
			return 0, JobPodRuntime, true
		}
	}
	return 0, 0, false
}

// usesNodeIP reports whether pod has the node's IP: host network pods and
// DaemonSets' pods.
func usesNodeIP(pod *corev1.Pod) bool {
	if pod.Spec.HostNetwork {
		return true
	}
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// allocateIP takes a free address of the node's pod CIDR (the invalid
// address when none is left).
func (n *node) allocateIP() netip.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	size := 1 << (32 - n.podCIDR.Bits())
	base := n.podCIDR.Addr()
	for i := 2; i < size-1 && i < len(n.usedIPs); i++ { // .1 is the gateway, the last the broadcast
		if !n.usedIPs[i] {
			n.usedIPs[i] = true
			return addIPv4(base, uint32(i))
		}
	}
	return netip.Addr{}
}

// reserveIP marks ip taken if it is in the node's pod CIDR, and returns
// it (the invalid address otherwise).
func (n *node) reserveIP(ip netip.Addr) netip.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.podCIDR.Contains(ip) {
		return netip.Addr{}
	}
	n.usedIPs[n.offset(ip)] = true
	return ip
}

func (n *node) releaseIP(ip netip.Addr) {
	if !ip.IsValid() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.podCIDR.Contains(ip) {
		n.usedIPs[n.offset(ip)] = false
	}
}

// offset is ip's place in the node's pod CIDR (which contains it).
func (n *node) offset(ip netip.Addr) byte { return ip.As4()[3] - n.podCIDR.Addr().As4()[3] }

// setIP records ip as key's pod's, unless the pod has been forgotten
// meanwhile (then ip is freed).
func (s *Simulator) setIP(key string, st *podState, ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[key] != st {
		st.node.releaseIP(ip)
		return
	}
	st.ip = ip
}
