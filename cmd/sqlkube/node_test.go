package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/node/fake"
	"github.com/sqlkube/sqlkube/node/fake/faketest"
)

// startTestServer runs `sqlkube server ARGS` in-process on a free port and
// returns the admin client configuration once it serves.
func startTestServer(t *testing.T, args ...string) *rest.Config {
	t.Helper()
	return startTestServerContext(t, context.Background(), args...)
}

// startTestServerContext is startTestServer with the command's context
// (its values reach the components: klog's contextual logger).
func startTestServerContext(t *testing.T, ctx context.Context, args ...string) *rest.Config {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(ctx)
	root := newRootCommand()
	root.SetArgs(append([]string{"server", "--data-dir", dir, "--secure-port", "0", "--log-level", "error", "--disable-node", "--disable-dns",
		"--kube-controller-manager-arg=--secure-port=0", "--kube-scheduler-arg=--secure-port=0"}, args...))
	pr, pw := io.Pipe()
	root.SetOut(pw)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sqlkube server: %v", err)
		}
	})
	served := announced(pr, "Admin kubeconfig:")
	select {
	case <-served:
	case err := <-done:
		t.Fatalf("sqlkube server exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("sqlkube server did not start")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestFakeNodes runs the simulator suite on `sqlkube server` with the
// credential the README describes: a user that RBAC grants only the
// sqlkube:fake-node ClusterRole (`sqlkube node --print-rbac`).
func TestFakeNodes(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(`sim-token,`+fake.DefaultUser+`,sim-uid,"system:nodes"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The suite binds a hand-made pod to a Job; Kubernetes' Job
	// controller would release it (it does not match the Job's selector).
	admin := startTestServer(t, "--token-auth-file", tokens, "--controllers=*,-job-controller")
	ctx := context.Background()
	ac := kubernetes.NewForConfigOrDie(admin)
	if _, err := ac.RbacV1().ClusterRoles().Create(ctx, fake.ClusterRole(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.RbacV1().ClusterRoleBindings().Create(ctx, fake.ClusterRoleBinding(""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sim := rest.AnonymousClientConfig(admin)
	sim.BearerToken = "sim-token"
	// The authorizer learns of the binding through an informer.
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, faketest.Timeout, true, func(ctx context.Context) (bool, error) {
		_, err := kubernetes.NewForConfigOrDie(sim).CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the fake-node credential cannot list nodes: %v", err)
	}
	faketest.Run(t, sim, admin, "sim-")
}

// TestServer_FakeNodes: `sqlkube server --fake-nodes 2` registers fake-0
// and fake-1, Ready, and runs a pod bound to one.
func TestServer_FakeNodes(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(startTestServer(t, "--fake-nodes", "2"))
	ctx := context.Background()
	for _, name := range []string{"fake-0", "fake-1"} {
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, faketest.Timeout, true, func(ctx context.Context) (bool, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("node %s not Ready: %v", name, err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{NodeName: "fake-1", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	// The default service account comes from a controller, just after
	// the namespace.
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, faketest.Timeout, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, faketest.Timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		t.Fatalf("pod on fake-1 not Running: %v", err)
	}
}

// TestNodeCommand_BadFlags: bad flags give a one-line error.
func TestNodeCommand_BadFlags(t *testing.T) {
	regularFile := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(regularFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "--server", "https://127.0.0.1:1"}, "give --server and --token"},
		{[]string{"node", "--fake", "--kubeconfig", "x", "--node-taints", "a=b"}, "--node-taints"},
		{[]string{"node", "--fake", "--kubeconfig", "x", "--node-taints", "a=b:Sometimes"}, "effect"},
		{[]string{"node", "--fake", "--kubeconfig", "x", "--capacity", "cpu=lots"}, "--capacity"},
		{[]string{"node", "--fake", "--kubeconfig", "x", "--node-labels", "novalue"}, "--node-labels"},
		{[]string{"node", "--fake", "--kubeconfig", "x", "--count", "-1"}, "--count"},
		{[]string{"node", "--fake", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, "--kubeconfig"},
		{[]string{"server", "--fake-nodes", "-2"}, "--fake-nodes"},
		{[]string{"server", "--registry-config-dir", filepath.Join(t.TempDir(), "missing")}, "--registry-config-dir"},
		{[]string{"server", "--registry-config-dir", t.TempDir(), "--container-runtime-endpoint", "unix:///x.sock"}, "--container-runtime-endpoint"},
		{[]string{"node", "--kubeconfig", "x", "--registry-config-dir", filepath.Join(t.TempDir(), "missing")}, "--registry-config-dir"},
		{[]string{"node", "--kubeconfig", "x", "--registry-config-dir", regularFile}, "not a directory"},
	} {
		root := newRootCommand()
		root.SetArgs(tc.args)
		root.SetOut(io.Discard)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: got %v, want one line about %s", tc.args, err, tc.want)
		}
	}
}

func TestNodeCommand_PrintRBAC(t *testing.T) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"node", "--print-rbac", "--rbac-user", "me"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: ClusterRole\n", "kind: ClusterRoleBinding", "name: sqlkube:fake-node", "name: me", "pods/status", "leases"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--print-rbac lacks %q:\n%s", want, out.String())
		}
	}
}

// announced closes the channel it returns once what r reads (a command's
// output) holds marker, and reads r to its end, so the command never
// blocks on it.
func announced(r io.Reader, marker string) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		var out bytes.Buffer
		buf := make([]byte, 4096)
		seen := false
		for {
			n, err := r.Read(buf)
			out.Write(buf[:n])
			if !seen && strings.Contains(out.String(), marker) {
				close(ch)
				seen = true
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}
