package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/internal/testbin"
	"github.com/sqlkube/sqlkube/node/containerd"
)

// TestRealNode_ShimBench weighs containerd's runc shim as a small program
// of its own, which sqlkube ships, against sqlkube's own binary as the
// shim (a build with -tags shim_multicall: cmd/sqlkube/shim_multicall.go).
// Each runs SQLKUBE_BENCH_PODS pods (default 10) on the host's node, one
// after the other; per pod it measures the shim's start (in containerd's
// log, from RunPodSandbox to "connecting to shim": the two processes of a
// shim's start, and the sandbox's network set up by CNI), the pod's start
// (created to Running, from the API), and with every pod running, each
// shim's memory (RSS, PSS and private bytes, /proc/PID/smaps_rollup); and
// the bare cost of starting either binary: `-v`, 20 times, from exec to
// exit (a shim's start execs it twice). Only with SQLKUBE_BENCH_SHIM=1:
// `make bench-shim`; docs/node.md has its figures.
func TestRealNode_ShimBench(t *testing.T) {
	if os.Getenv("SQLKUBE_BENCH_SHIM") != "1" {
		t.Skip("a benchmark: set SQLKUBE_BENCH_SHIM=1 (make bench-shim)")
	}
	requireNodeHost(t)
	pods := 10
	if n, err := strconv.Atoi(os.Getenv("SQLKUBE_BENCH_PODS")); err == nil && n > 0 {
		pods = n
	}
	// sqlkube as its own shim: containerd runs the link
	// containerd-shim-runc-v2 beside it.
	dir := t.TempDir()
	multicall, err := testbin.BuildTags(dir, "shim_multicall")
	if err != nil {
		t.Fatal(err)
	}
	shimLink := filepath.Join(dir, containerd.ShimName)
	_ = os.Remove(shimLink)
	if err := os.Symlink("sqlkube", shimLink); err != nil {
		t.Fatal(err)
	}

	var results []string
	for _, v := range []struct{ name, bin string }{{"separate", sqlkubeBin}, {"multicall", multicall}} {
		t.Run(v.name, func(t *testing.T) {
			defer func(bin string) { sqlkubeBin = bin }(sqlkubeBin)
			sqlkubeBin = v.bin
			shim := filepath.Join(filepath.Dir(v.bin), containerd.ShimName)
			execWall := execCost(t, shim, 20)
			r := shimRun(t, pods)
			line := fmt.Sprintf("%-9s `-v` p50 %v; shim start p50 %v; pod start p50 %v; per shim RSS %d KiB, PSS %d KiB, private %d KiB",
				v.name, execWall, median(r.shimStart), median(r.podStart), r.rss, r.pss, r.private)
			t.Log(line)
			results = append(results, line)
		})
	}
	for _, l := range results {
		t.Log(l)
	}
}

type shimFigures struct {
	shimStart, podStart []time.Duration
	rss, pss, private   int // KiB per shim, means
}

// shimRun starts a node with sqlkubeBin, runs pods pods on it one after
// the other and measures them (TestRealNode_ShimBench).
func shimRun(t *testing.T, pods int) shimFigures {
	t.Helper()
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), "bench-shim")
	cs := kubernetes.NewForConfigOrDie(s.restConfig(t, s.kubeconfig))
	ctx := context.Background()
	var f shimFigures
	for i := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("shim-%d", i)},
			Spec: corev1.PodSpec{
				NodeName:                      "bench-shim", // the runtime is measured, not the scheduler
				TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "c", Image: testImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sleep", "3600"}}},
			},
		}
		start := time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == corev1.PodRunning {
				break
			}
			if time.Since(start) > 90*time.Second {
				t.Fatalf("pod %s not Running after 90s", pod.Name)
			}
			time.Sleep(20 * time.Millisecond)
		}
		f.podStart = append(f.podStart, time.Since(start))
	}
	ctrDir := filepath.Join(s.dataDir, "containerd")
	shims := shimsOf(t, containerd.Socket(ctrDir))
	if len(shims) != pods {
		t.Fatalf("%d shims for %d pods", len(shims), pods)
	}
	for pid := range shims {
		m := smapsRollup(t, pid)
		f.rss += m["Rss"]
		f.pss += m["Pss"]
		f.private += m["Private_Clean"] + m["Private_Dirty"]
	}
	f.rss, f.pss, f.private = f.rss/pods, f.pss/pods, f.private/pods
	log := filepath.Join(ctrDir, "containerd.log")
	if f.shimStart = shimStarts(t, log); len(f.shimStart) != pods {
		b, _ := exec.Command("grep", "-m", "3", "-e", "RunPodSandbox", "-e", "connecting to shim", log).Output()
		t.Fatalf("%d shim starts in containerd's log for %d pods; its lines:\n%s", len(f.shimStart), pods, b)
	}
	return f
}

// shimStarts reads, for each sandbox in containerd's log, the time from
// RunPodSandbox to its shim's start ("connecting to shim ID").
func shimStarts(t *testing.T, log string) []time.Duration {
	t.Helper()
	file, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var (
		at = regexp.MustCompile(`time="([^"]+)"`)
		// The sandbox's metadata in protobuf's text format, quoted.
		run     = regexp.MustCompile(`msg="RunPodSandbox for name:\\"([^\\]+)\\"`)
		returns = regexp.MustCompile(`returns sandbox id \\"([0-9a-f]+)\\"`)
		connect = regexp.MustCompile(`msg="connecting to shim ([0-9a-f]+)"`)
	)
	started, idOf, connected := map[string]time.Time{}, map[string]string{}, map[string]time.Time{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		m := at.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		if r := run.FindStringSubmatch(l); r != nil {
			if id := returns.FindStringSubmatch(l); id != nil {
				idOf[id[1]] = r[1]
			} else {
				started[r[1]] = ts
			}
		} else if c := connect.FindStringSubmatch(l); c != nil {
			connected[c[1]] = ts
		}
	}
	var out []time.Duration
	for id, name := range idOf {
		if c, ok := connected[id]; ok {
			out = append(out, c.Sub(started[name]))
		}
	}
	return out
}

// smapsRollup is /proc/PID/smaps_rollup's figures in KiB.
func smapsRollup(t *testing.T, pid int) map[string]int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[2] == "kB" {
			n, _ := strconv.Atoi(f[1])
			out[strings.TrimSuffix(f[0], ":")] = n
		}
	}
	return out
}

// execCost runs bin -v n times: the median time from exec to exit. (Its
// maximum RSS would not tell: a child of this process counts this
// process's pages until it execs.)
func execCost(t *testing.T, bin string, n int) time.Duration {
	t.Helper()
	var walls []time.Duration
	for range n {
		start := time.Now()
		if out, err := exec.Command(bin, "-v").CombinedOutput(); err != nil {
			t.Fatalf("%s -v: %v\n%s", bin, err, out)
		}
		walls = append(walls, time.Since(start))
	}
	return median(walls)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(100 * time.Microsecond)
}
