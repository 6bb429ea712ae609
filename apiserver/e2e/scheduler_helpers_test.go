package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/internal/testlog"
)

// schedWait bounds every wait of the scheduler tests.
const schedWait = 60 * time.Second

// proc is a running sqlkube process that is not an API server
// (`sqlkube node --fake`, `sqlkube scheduler`).
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testlog.Buffer
	done chan error
	err  error
}

// startProc starts `sqlkube ARGS... --log-format json`; it is stopped with
// SIGTERM when t ends unless it has already exited.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{name: strings.Join(args[:1], " "), out: &testlog.Buffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(sqlkubeBin, append(args, "--log-format", "json")...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(t, syscall.SIGTERM) })
	return p
}

// stop sends sig and waits for the process to exit; after SIGTERM it must
// exit cleanly.
func (p *proc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if p.done == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case p.err = <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		p.err = <-p.done
		t.Errorf("sqlkube %s did not stop within %v of %v", p.name, stopTimeout, sig)
	}
	p.done = nil
	if sig == syscall.SIGTERM && p.err != nil {
		t.Errorf("sqlkube %s exited with %v after SIGTERM\n%s", p.name, p.err, p.out)
	}
}

// waitLog waits until the process has logged a line matching re and
// returns re's first group in it.
func (p *proc) waitLog(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	var got string
	poll(t, "sqlkube "+p.name+" logs "+re.String(), func(context.Context) (bool, error) {
		if m := re.FindStringSubmatch(p.out.String()); m != nil {
			got = m[len(m)-1]
			return true, nil
		}
		select {
		case err := <-p.done:
			p.done = nil
			return false, fmt.Errorf("exited: %v\n%s", err, p.out)
		default:
		}
		return false, nil
	})
	return got
}

// startFakeNodes runs `sqlkube node --fake` with count nodes named
// PREFIX0… and waits until they are Ready.
func startFakeNodes(t *testing.T, s *server, cs kubernetes.Interface, prefix string, count int, args ...string) *proc {
	t.Helper()
	p := startProc(t, append([]string{"node", "--fake", "--kubeconfig", s.kubeconfig, "--name-prefix", prefix, "--count", fmt.Sprint(count)}, args...)...)
	for i := range count {
		waitNodeReady(t, cs, fmt.Sprintf("%s%d", prefix, i))
	}
	return p
}

func waitNodeReady(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	poll(t, "node "+name+" Ready", func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// poll calls cond every 100 ms until it is true, failing t on an error or
// after schedWait.
func poll(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := pollErr(cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// pollErr calls cond every 100 ms until it is true, an error other than
// NotFound or Conflict, or schedWait has passed.
func pollErr(cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), schedWait)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				last = err // a transient state; try again
				return false, nil
			}
			return false, err
		}
		return ok, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

// clientset is an admin client of s.
func (s *server) clientset(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	cfg := s.restConfig(t, s.kubeconfig)
	cfg.QPS, cfg.Burst = 200, 400 // the tests poll
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// namespace creates a namespace and waits for its default service account
// (pods need it).
func namespace(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "service account "+name+"/default", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
	return name
}

// testPod is a pod of one container with the given requests
// ("cpu=2,memory=1Gi"; empty: none), never restarted and deleted at once.
func testPod(name, requests string) *corev1.Pod {
	zero := int64(0)
	c := corev1.Container{Name: "c", Image: "registry.k8s.io/pause:3.10"}
	if requests != "" {
		c.Resources.Requests = corev1.ResourceList{}
		for _, kv := range strings.Split(requests, ",") {
			k, v, _ := strings.Cut(kv, "=")
			c.Resources.Requests[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		// Extended resources must be limited as they are requested.
		for k, q := range c.Resources.Requests {
			if strings.Contains(string(k), "/") {
				c.Resources.Limits = corev1.ResourceList{k: q}
			}
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{c}, TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
}

func createPod(t *testing.T, cs kubernetes.Interface, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return out
}

// waitScheduled waits until the pod is bound and returns its node.
func waitScheduled(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	var node string
	poll(t, "pod "+ns+"/"+name+" scheduled", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	return node
}

// waitFailedScheduling waits for the pod's condition PodScheduled=False
// (reason Unschedulable) and a FailedScheduling event matching re, and
// returns the event's message.
func waitFailedScheduling(t *testing.T, cs kubernetes.Interface, ns, name string, re *regexp.Regexp) string {
	t.Helper()
	var msg string
	var seen []string
	err := pollErr(func(ctx context.Context) (bool, error) {
		evs, err := podEvents(ctx, cs, ns, name, "FailedScheduling")
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range evs {
			seen = append(seen, e.Message)
			if msg = e.Message; re.MatchString(msg) {
				p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if p.Spec.NodeName != "" {
					return false, fmt.Errorf("pod was bound to %s", p.Spec.NodeName)
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
						return true, nil
					}
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s/%s FailedScheduling %s: %v; its FailedScheduling messages: %q", ns, name, re, err, seen)
	}
	return msg
}

// podEvents lists the events of reason about pod ns/name (any, if reason
// is empty), oldest first.
func podEvents(ctx context.Context, cs kubernetes.Interface, ns, name, reason string) ([]corev1.Event, error) {
	list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name && (reason == "" || e.Reason == reason) {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).Before(eventTime(out[j])) })
	return out, nil
}

func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// podNodes maps the namespace's pods to their nodes ("" while pending).
func podNodes(t *testing.T, cs kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		out[p.Name] = p.Spec.NodeName
	}
	return out
}
