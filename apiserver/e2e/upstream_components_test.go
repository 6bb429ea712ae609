package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The tests in this file run Kubernetes' own kube-controller-manager and
// kube-scheduler binaries against `sqlkube server`. They need the
// binaries built at go.mod's k8s.io/kubernetes version (about 10 minutes
// on 2 cores), so they skip unless SQLKUBE_TEST_KUBE_BIN_DIR names the
// directory holding them:
//
//	go build -o /tmp/k8sbin/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
//	go build -o /tmp/k8sbin/kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
//	SQLKUBE_TEST_KUBE_BIN_DIR=/tmp/k8sbin go test -run TestUpstream -v ./apiserver/e2e/
//
// SQLKUBE_TEST_UPSTREAM_SCALE=NODES,PODS runs the scheduler's test at the
// issue's scale (1000,3000) instead of 100 nodes and 300 pods.

const upstreamTimeout = 3 * time.Minute

// kubeBinary returns the path of Kubernetes' binary name, or skips t.
func kubeBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("SQLKUBE_TEST_KUBE_BIN_DIR")
	if dir == "" {
		t.Skipf("skipping: %s not available; set SQLKUBE_TEST_KUBE_BIN_DIR to a directory with it (go build -o DIR/%s k8s.io/kubernetes/cmd/%s)", name, name, name)
	}
	p := filepath.Join(dir, name)
	if !isExecutable(p) {
		t.Skipf("skipping: %s is not an executable (SQLKUBE_TEST_KUBE_BIN_DIR=%s; go build -o %s k8s.io/kubernetes/cmd/%s)", p, dir, p, name)
	}
	return p
}

// runUpstream runs one of Kubernetes' binaries against s until t ends,
// with the flags it needs to talk to sqlkube and extra. Its output is
// logged if t fails.
func (s *server) runUpstream(t *testing.T, bin string, extra ...string) {
	t.Helper()
	args := append([]string{"--kubeconfig", s.kubeconfig, "--leader-elect=false", "--secure-port=0"}, extra...)
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	w := &lockedWriter{w: &out}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(stopTimeout):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				w.mu.Lock()
				t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), errorLines(out.String()))
				w.mu.Unlock()
			}
		})
	})
}

// errorLines keeps klog's error and warning lines (and the last lines).
func errorLines(log string) string {
	lines := strings.Split(log, "\n")
	var keep []string
	for i, l := range lines {
		if strings.HasPrefix(l, "E") || strings.HasPrefix(l, "W") || i >= len(lines)-20 {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// pollState calls cond every 200 ms until it returns true or timeout passes.
func pollState(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, timeout, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUpstream_KubeControllerManager: the real kube-controller-manager,
// with every controller, against `sqlkube server --controllers=-*` (whose
// own scheduler binds) with simulated nodes reconciles a Deployment of 3
// replicas to 3 Running pods, and garbage-collects them when it goes.
func TestUpstream_KubeControllerManager(t *testing.T) {
	kcm := kubeBinary(t, "kube-controller-manager")
	s := startCommand(t, t.TempDir(), "server", "--controllers=-*", "--fake-nodes", "3")
	s.runUpstream(t, kcm, "--controllers=*",
		"--service-account-private-key-file="+filepath.Join(s.dataDir, "tls", "sa.key"),
		"--root-ca-file="+filepath.Join(s.dataDir, "tls", "ca.crt"))
	cs := kubernetes.NewForConfigOrDie(s.restConfig(t, s.kubeconfig))
	ctx := context.Background()

	// The namespace's service account and root CA come from
	// kube-controller-manager's controllers.
	pollState(t, upstreamTimeout, "default service account", func() (bool, string) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pollState(t, upstreamTimeout, "3 Running pods and an available Deployment", func() (bool, string) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				running++
			}
		}
		got, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := got.Status
		return running == 3 && len(pods.Items) == 3 && st.AvailableReplicas == 3 && st.ObservedGeneration == got.Generation,
			fmt.Sprintf("%d pods, %d Running; deployment status %+v", len(pods.Items), running, st)
	})
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
		t.Errorf("root CA config map (kube-controller-manager's root-ca-cert-publisher): %v", err)
	}
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pollState(t, upstreamTimeout, "pods gone after the Deployment's delete", func() (bool, string) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
	})
}

// TestUpstream_KubeScheduler: the real kube-scheduler against `sqlkube
// server --disable-scheduler` with 100 simulated nodes binds 300 pods
// created without a node (3,000 on 1,000 nodes with
// SQLKUBE_TEST_UPSTREAM_SCALE=1000,3000). (It once waited forever for its informers'
// caches of storage classes, CSI nodes, CSI storage capacities and
// replication controllers.)
func TestUpstream_KubeScheduler(t *testing.T) {
	ks := kubeBinary(t, "kube-scheduler")
	nodes, pods := 100, 300
	if v := os.Getenv("SQLKUBE_TEST_UPSTREAM_SCALE"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d", &nodes, &pods); err != nil {
			t.Fatalf("SQLKUBE_TEST_UPSTREAM_SCALE=%q: want NODES,PODS: %v", v, err)
		}
	}
	s := startCommand(t, t.TempDir(), "server", "--disable-scheduler", "--fake-nodes", fmt.Sprint(nodes))
	s.runUpstream(t, ks)
	cfg := s.restConfig(t, s.kubeconfig)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	pollState(t, upstreamTimeout, "Ready nodes and the default service account", func() (bool, string) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		_, saErr := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return ready == nodes && saErr == nil, fmt.Sprintf("%d Ready nodes; service account: %v", ready, saErr)
	})
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for w := range 10 {
		wg.Go(func() {
			for i := w; i < pods; i += 10 {
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", i), Labels: map[string]string{"app": "sched"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.0"}}},
				}
				if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pollState(t, upstreamTimeout, fmt.Sprintf("%d pods bound", pods), func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=sched"})
		if err != nil {
			return false, err.Error()
		}
		bound, byNode := 0, map[string]int{}
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
				byNode[p.Spec.NodeName]++
			}
		}
		return bound == pods, fmt.Sprintf("%d of %d bound, on %d nodes", bound, pods, len(byNode))
	})
}

func ptrTo[T any](v T) *T { return &v }
