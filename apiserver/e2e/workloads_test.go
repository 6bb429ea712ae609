package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// TestKubectl_DeploymentRollout: with each kubectl, a Deployment made by
// `kubectl create deployment` runs its pods, scales up and down, and
// rolls out (set image, rollout status/history/undo/restart/pause/resume)
// within its maxSurge and maxUnavailable. The nodes are a `sqlkube node
// --fake` process whose pods start 300ms after they are bound, so every
// step of a rollout is seen by a watch.
func TestKubectl_DeploymentRollout(t *testing.T) {
	bins := kubectls(t)
	s := startCommand(t, t.TempDir(), "server")
	startSqlkube(t, "node", "--fake", "--count", "3", "--pod-start-delay", "300ms", "--kubeconfig", s.kubeconfig)
	cs := s.clientset(t)
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := "rollout-" + strings.ReplaceAll(name, ".", "-")
			s.mustKubectl(t, bin, "create", "namespace", ns)
			k := func(args ...string) string { return s.mustKubectl(t, bin, append([]string{"-n", ns}, args...)...) }
			images := func(n int, image string) string { return strings.TrimSpace(strings.Repeat(image+" ", n)) }
			podImages := []string{"-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.spec.containers[0].image} {end}"}
			running := []string{"-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.status.phase} {end}"}

			// The namespace's default service account comes from a
			// controller; create retries until it is there.
			s.waitKubectl(t, bin, "deployment.apps/web created", "-n", ns, "create", "deployment", "web", "--image=nginx", "--replicas=3")
			s.waitKubectl(t, bin, images(3, "Running"), running...)

			k("scale", "deployment", "web", "--replicas=10")
			s.waitKubectl(t, bin, images(10, "Running"), running...)
			k("scale", "deployment", "web", "--replicas=2")
			s.waitKubectl(t, bin, images(2, "Running"), running...)

			k("scale", "deployment", "web", "--replicas=4")
			k("patch", "deployment", "web", "-p", `{"spec":{"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":1}}}}`)
			k("rollout", "status", "deployment/web", "--timeout=60s")
			s.waitKubectl(t, bin, images(4, "Running"), running...)

			bounds := watchRollout(t, cs, ns, "app=web")
			k("set", "image", "deployment/web", "nginx=nginx:1.27")
			if out := k("rollout", "status", "deployment/web", "--timeout=60s"); !strings.Contains(out, "successfully rolled out") {
				t.Fatalf("rollout status:\n%s", out)
			}
			s.waitKubectl(t, bin, images(4, "nginx:1.27"), podImages...)
			maxPods, minReady, created := bounds()
			t.Logf("rollout of 4 replicas (maxSurge 1, maxUnavailable 1): at most %d pods, at least %d ready, %d created", maxPods, minReady, created)
			if maxPods > 4+1 || minReady < 4-1 || created < 4 {
				t.Fatalf("rollout of 4 replicas with maxSurge 1, maxUnavailable 1: up to %d pods, down to %d ready, %d created", maxPods, minReady, created)
			}
			if out := k("rollout", "history", "deployment/web"); !regexp.MustCompile(`(?m)^1\s`).MatchString(out) || !regexp.MustCompile(`(?m)^2\s`).MatchString(out) {
				t.Fatalf("rollout history:\n%s", out)
			}

			k("rollout", "undo", "deployment/web")
			k("rollout", "status", "deployment/web", "--timeout=60s")
			s.waitKubectl(t, bin, images(4, "nginx"), podImages...)
			if out := k("rollout", "history", "deployment/web"); !regexp.MustCompile(`(?m)^3\s`).MatchString(out) {
				t.Fatalf("rollout history after undo:\n%s", out)
			}

			k("rollout", "restart", "deployment/web")
			restartedAt := k("get", "deployment", "web", "-o", `jsonpath={.spec.template.metadata.annotations.kubectl\.kubernetes\.io/restartedAt}`)
			if restartedAt == "" {
				t.Fatal("rollout restart: no restartedAt annotation on the template")
			}
			k("rollout", "status", "deployment/web", "--timeout=60s")
			s.waitKubectl(t, bin, images(4, restartedAt), "-n", ns, "get", "pods", "-l", "app=web", "-o", `jsonpath={range .items[*]}{.metadata.annotations.kubectl\.kubernetes\.io/restartedAt} {end}`)

			k("rollout", "pause", "deployment/web")
			k("set", "image", "deployment/web", "nginx=nginx:1.28")
			gen := k("get", "deployment", "web", "-o", "jsonpath={.metadata.generation}")
			s.waitKubectl(t, bin, gen+" true", "-n", ns, "get", "deployment", "web", "-o", "jsonpath={.status.observedGeneration} {.spec.paused}")
			if out := k("get", "rs", "-l", "app=web", "-o", "jsonpath={.items[*].spec.template.spec.containers[0].image}"); strings.Contains(out, "1.28") {
				t.Fatalf("a paused Deployment rolled out: ReplicaSets of images %s", out)
			}
			if out := k("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}"); strings.Contains(out, "1.28") {
				t.Fatalf("a paused Deployment rolled out: pods of images %s", out)
			}
			k("rollout", "resume", "deployment/web")
			k("rollout", "status", "deployment/web", "--timeout=60s")
			s.waitKubectl(t, bin, images(4, "nginx:1.28"), podImages...)
			s.mustKubectl(t, bin, "delete", "namespace", ns, "--wait=false")
		})
	}
}

// watchRollout watches the pods of ns matching selector until t ends;
// bounds reports the most pods that were live (not terminating, not
// finished) at once, the fewest of them that were ready, and how many
// pods were created, since the watch began.
func watchRollout(t *testing.T, cs kubernetes.Interface, ns, selector string) (bounds func() (maxPods, minReady, created int)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		pods[list.Items[i].Name] = &list.Items[i]
	}
	count := func() (live, ready int) {
		for _, p := range pods {
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			live++
			if podReady(p) {
				ready++
			}
		}
		return live, ready
	}
	maxPods, minReady := count()
	created := 0
	var watchErr error
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			mu.Lock()
			switch p, _ := ev.Object.(*corev1.Pod); {
			case ev.Type == watch.Error:
				watchErr = fmt.Errorf("watch error: %v", ev.Object)
			case ev.Type == watch.Deleted:
				delete(pods, p.Name)
			case p != nil:
				if pods[p.Name] == nil {
					created++
				}
				pods[p.Name] = p
			}
			live, ready := count()
			maxPods, minReady = max(maxPods, live), min(minReady, ready)
			mu.Unlock()
		}
		mu.Lock()
		if ctx.Err() == nil && watchErr == nil {
			watchErr = fmt.Errorf("pod watch ended early")
		}
		mu.Unlock()
	}()
	return func() (int, int, int) {
		mu.Lock()
		defer mu.Unlock()
		if watchErr != nil {
			t.Fatal(watchErr)
		}
		return maxPods, minReady, created
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// startSqlkube starts `sqlkube ARGS...` (a node or controller-manager
// process), logging JSON to its stderr buffer; it is stopped with SIGTERM
// when t ends, unless stopped before.
func startSqlkube(t *testing.T, args ...string) *server {
	t.Helper()
	cmd := exec.Command(sqlkubeBin, append(args, "--log-format", "json")...)
	p := &server{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = &lockedWriter{w: p.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// logs is what a process started by startSqlkube has logged so far.
func (s *server) logs() string {
	lw := s.cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return s.stderr.String()
}

// apply runs kubectl apply on manifest.
func (s *server) apply(t *testing.T, bin, manifest string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	writeFile(t, path, manifest)
	return s.mustKubectl(t, bin, "apply", "-f", path)
}

// until polls cond until it holds, failing t after timeout.
func until(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last error: %v)", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
