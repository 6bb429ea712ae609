package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubecm "k8s.io/kubernetes/pkg/kubelet/cm"
)

// testInPlaceResize resizes a running pod's CPU and memory twice, up with
// kubectl patch --subresource resize and down through the resize
// subresource's replace endpoint (what the conformance test "resize pod
// via the replace endpoint" does), and checks each time what the
// conformance suite checks: the kubelet clears the resize conditions at
// the pod's new generation, reports the new resources in the container's
// status and has set them on the container's cgroup, without a restart;
// and that the pod's own cgroup, under the node's cgroup root, holds the
// pod's new memory limit.
func testInPlaceResize(t *testing.T, s *server) {
	k := kubectlPath(t)
	cs := s.clientset(t)
	ctx := context.Background()
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Pod
metadata: {name: resized}
spec:
  containers:
  - name: c
    image: IMAGE
    command: [sh, -c, "trap 'exit 0' TERM; sleep 3600 & wait"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
`))
	s.mustKubectl(t, k, "wait", "--for=condition=Ready", "pod/resized", "--timeout=90s")
	pod, err := cs.CoreV1().Pods("default").Get(ctx, "resized", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkContainerCgroup(t, s, pod.Spec.Containers[0].Resources)

	up := resources("200m", "48Mi", "400m", "96Mi")
	s.mustKubectl(t, k, "patch", "pod", "resized", "--subresource", "resize", "-p",
		`{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"200m","memory":"48Mi"},"limits":{"cpu":"400m","memory":"96Mi"}}}]}}`)
	pod = waitResized(t, s, 2, up)
	checkContainerCgroup(t, s, up)
	checkPodCgroup(t, s, pod, "100663296") // 96Mi, its one container's limit

	down := resources("150m", "40Mi", "300m", "80Mi")
	pod.Spec.Containers[0].Resources = down
	got, err := cs.CoreV1().Pods("default").UpdateResize(ctx, "resized", pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the resize subresource's replace endpoint: %v", err)
	}
	if got.Generation != 3 {
		t.Errorf("after the second resize the pod's generation is %d, want 3", got.Generation)
	}
	pod = waitResized(t, s, 3, down)
	checkContainerCgroup(t, s, down)
	checkPodCgroup(t, s, pod, "83886080") // 80Mi
	if n := pod.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("the container restarted %d times for resizes that need no restart", n)
	}
}

// resources are a container's requests and limits of cpu and memory.
func resources(cpuReq, memReq, cpuLim, memLim string) v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// waitResized waits until the kubelet has actuated pod resized's resize to
// generation: the status observed it, no resize condition is left, the
// pod is Ready and its container's status reports want. It returns the
// pod.
func waitResized(t *testing.T, s *server, generation int64, want v1.ResourceRequirements) *v1.Pod {
	t.Helper()
	cs := s.clientset(t)
	var pod *v1.Pod
	state := "not read"
	ok := func() bool {
		p, err := cs.CoreV1().Pods("default").Get(context.Background(), "resized", metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false
		}
		pod, state = p, resizeState(p)
		if p.Generation != generation || p.Status.ObservedGeneration != generation || len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodResizeInProgress || c.Type == v1.PodResizePending {
				return false
			}
			if c.Type == v1.PodReady && c.Status != v1.ConditionTrue {
				return false
			}
		}
		r := p.Status.ContainerStatuses[0].Resources
		return r != nil && apiequality.Semantic.DeepEqual(*r, want)
	}
	deadline := time.Now().Add(90 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("the resize to generation %d was not actuated in 90s: %s", generation, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return pod
}

// resizeState is what the pod's status says of a resize, for a failure.
func resizeState(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d, observed %d", p.Generation, p.Status.ObservedGeneration)
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodResizeInProgress || c.Type == v1.PodResizePending {
			fmt.Fprintf(&b, ", %s=%s (%s: %s, generation %d)", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, ", container %s resources %v", c.Name, c.Resources)
	}
	return b.String()
}

// checkContainerCgroup checks the cgroup of pod resized's container, read
// inside it as the conformance suite reads it: cpu shares (or weight)
// from the request, the CFS quota from the cpu limit, the memory limit.
func checkContainerCgroup(t *testing.T, s *server, want v1.ResourceRequirements) {
	t.Helper()
	shares := kubecm.MilliCPUToShares(want.Requests.Cpu().MilliValue())
	quota := kubecm.MilliCPUToQuota(want.Limits.Cpu().MilliValue(), kubecm.QuotaPeriod)
	mem := strconv.FormatInt(want.Limits.Memory().Value(), 10)
	files := []string{"/sys/fs/cgroup/cpu/cpu.shares", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
	wants := []string{strconv.FormatUint(shares, 10), strconv.FormatInt(quota, 10), mem}
	if cgroups.IsCgroup2UnifiedMode() {
		files = []string{"/sys/fs/cgroup/cpu.weight", "/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/memory.max"}
		wants = []string{strconv.FormatUint(cgroups.ConvertCPUSharesToCgroupV2Value(shares), 10), fmt.Sprintf("%d %d", quota, kubecm.QuotaPeriod), mem}
	}
	out := s.mustKubectl(t, kubectlPath(t), append([]string{"exec", "resized", "--", "cat"}, files...)...)
	if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(wants, " ") {
		t.Errorf("the container's cgroup (%s) holds %q, want %q", strings.Join(files, ", "), got, wants)
	}
}

// checkPodCgroup checks the memory limit of pod's cgroup, a burstable pod
// of s's kubelet, read on the host.
func checkPodCgroup(t *testing.T, s *server, pod *v1.Pod, want string) {
	t.Helper()
	dir := filepath.Join(nodeCgroupRoot(s.dataDir), "kubepods", "burstable", "pod"+string(pod.UID))
	file := filepath.Join("/sys/fs/cgroup/memory", dir, "memory.limit_in_bytes")
	if cgroups.IsCgroup2UnifiedMode() {
		file = filepath.Join("/sys/fs/cgroup", dir, "memory.max")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Errorf("the pod's cgroup: %v", err)
		return
	}
	if got := strings.TrimSpace(string(b)); got != want {
		t.Errorf("the pod's cgroup %s holds %s, want %s", file, got, want)
	}
}
