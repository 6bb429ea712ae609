package fake

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerID is the runtime ID reported for a container of pod.
func containerID(pod *corev1.Pod, name string) string {
	return "fake://" + string(pod.UID) + "/" + name
}

func imageID(image string) string { return "fake://" + image }

// runningByUs reports whether pod shows the status start writes, and when
// its containers started.
func runningByUs(pod *corev1.Pod) (bool, time.Time) {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		return false, time.Time{}
	}
	var started time.Time
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running == nil || c.ContainerID != containerID(pod, c.Name) {
			return false, time.Time{}
		}
		if t := c.State.Running.StartedAt.Time; started.IsZero() || t.Before(started) {
			started = t
		}
	}
	return true, started
}

func restartCount(pod *corev1.Pod) int32 {
	var n int32
	for _, c := range pod.Status.ContainerStatuses {
		n = max(n, c.RestartCount)
	}
	return n
}

// setCondition sets a pod condition, keeping its transition time when its
// status stays.
func setCondition(st *corev1.PodStatus, typ corev1.PodConditionType, status corev1.ConditionStatus, reason string, now metav1.Time) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == typ {
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason = status, reason
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: status, Reason: reason, LastTransitionTime: now})
}

// runningStatus makes pod Running on a node at hostIP with podIP: init
// containers completed (sidecars running), containers running and ready
// (readiness probes pass), all conditions true.
func runningStatus(pod *corev1.Pod, hostIP, podIP netip.Addr, now time.Time, restarts int32) {
	t := metav1.NewTime(now)
	st := &pod.Status
	st.Phase = corev1.PodRunning
	st.Reason, st.Message = "", ""
	st.HostIP, st.HostIPs = hostIP.String(), []corev1.HostIP{{IP: hostIP.String()}}
	st.PodIP, st.PodIPs = podIP.String(), []corev1.PodIP{{IP: podIP.String()}}
	if st.StartTime == nil {
		st.StartTime = &t
	}
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		setCondition(st, c, corev1.ConditionTrue, "", t)
	}
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod, c.Name)}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: t}
			cs.Ready, cs.Started = true, ptrTo(true)
		} else {
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: t, FinishedAt: t, ContainerID: cs.ContainerID}
			cs.Started = ptrTo(false)
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod, c.Name),
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
			Ready:        true,
			Started:      ptrTo(true),
			RestartCount: restarts,
		})
	}
}

func exitReason(exit int32) string {
	if exit == 0 {
		return "Completed"
	}
	return "Error"
}

// terminatedStatus ends pod: Succeeded (exit 0) or Failed, its containers
// terminated with exit, not ready.
func terminatedStatus(pod *corev1.Pod, exit int32, started, now time.Time) {
	t := metav1.NewTime(now)
	st := &pod.Status
	st.Phase = corev1.PodSucceeded
	if exit != 0 {
		st.Phase = corev1.PodFailed
	}
	setCondition(st, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", t)
	setCondition(st, corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted", t)
	setCondition(st, corev1.PodReady, corev1.ConditionFalse, "PodCompleted", t)
	for i := range st.ContainerStatuses {
		c := &st.ContainerStatuses[i]
		c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: exitReason(exit), StartedAt: metav1.NewTime(started), FinishedAt: t, ContainerID: c.ContainerID,
		}}
		c.Ready, c.Started = false, ptrTo(false)
	}
	for i := range st.InitContainerStatuses {
		c := &st.InitContainerStatuses[i]
		if c.State.Running != nil { // sidecars stop with the pod
			c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: c.State.Running.StartedAt, FinishedAt: t, ContainerID: c.ContainerID,
			}}
			c.Ready, c.Started = false, ptrTo(false)
		}
	}
}

// restartedStatus records that pod's containers exited with exit and
// started again at once: the exit is their lastState, restartCount goes
// up, the pod stays Running and ready.
func restartedStatus(pod *corev1.Pod, exit int32, started, now time.Time) {
	t := metav1.NewTime(now)
	for i := range pod.Status.ContainerStatuses {
		c := &pod.Status.ContainerStatuses[i]
		c.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: exitReason(exit), StartedAt: metav1.NewTime(started), FinishedAt: t, ContainerID: c.ContainerID,
		}}
		c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}
		c.RestartCount++
	}
}

func ptrTo[T any](v T) *T { return &v }
