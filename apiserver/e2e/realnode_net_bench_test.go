package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRealNode_ServiceBench measures Services on a real node (in a network
// namespace of the test's): requests/s through a cluster IP to 3 replicas
// against the same straight to one pod's IP (`sqlkube bench http`, a new
// connection per request, run in the node's namespace), and the time from
// a Service's creation to its first answer. Medians of SQLKUBE_BENCH_ROUNDS
// rounds (default 3). Only with SQLKUBE_BENCH_NET=1: `make bench-net`.
func TestRealNode_ServiceBench(t *testing.T) {
	if os.Getenv("SQLKUBE_BENCH_NET") != "1" {
		t.Skip("a benchmark: set SQLKUBE_BENCH_NET=1 (make bench-net)")
	}
	requireNodeHost(t)
	requireNetLab(t)
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("SQLKUBE_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	k := kubectlPath(t)
	lab := newNetLab(t)
	ns, ip := lab.addNamespace(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	t.Cleanup(func() { cleanUpNode(t, dataDir) })
	s := startCommandNetns(t, ns, dataDir, "server", "--disable-node=false", "--node-name", "bench", "--node-ip", ip,
		"--bind-address", ip, "--kubelet-arg=--port="+strconv.Itoa(freePort(t)))
	t.Cleanup(func() { s.removeAllPods(t) })
	s.waitKubectl(t, k, "True", "get", "node", "bench", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	s.sqlkube(t, "images", "import", writeTestImage(t))
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, webDeployment(3)))
	s.mustKubectl(t, k, "rollout", "status", "deployment/web", "--timeout=90s")
	podIP := strings.Fields(s.mustKubectl(t, k, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].status.podIP}"))[0]
	clusterIP := s.mustKubectl(t, k, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}")
	waitFor(t, 30*time.Second, "the service to answer in the node's namespace", func() bool {
		return sqlkubeCommand(ns, "bench", "http", "--url", "http://"+clusterIP+"/", "--first-ok", "1s").Run() == nil
	})

	benchHTTP := func(url string) float64 {
		t.Helper()
		out, err := sqlkubeCommand(ns, "bench", "http", "--url", url, "--duration", "10s", "--concurrency", "8").Output()
		if err != nil {
			t.Fatalf("bench http %s: %v", url, err)
		}
		f := strings.Fields(string(out))
		if len(f) < 4 || f[0] != "requests/s" || f[3] != "0" {
			t.Fatalf("bench http %s: %q (errors are not measured)", url, out)
		}
		rps, _ := strconv.ParseFloat(f[1], 64)
		t.Logf("%s: %s", url, strings.TrimSpace(string(out)))
		return rps
	}
	var direct, service []float64
	var firstAnswer []time.Duration
	cs := s.clientset(t)
	for i := 0; i < rounds; i++ {
		direct = append(direct, benchHTTP("http://"+podIP+":8080/"))
		service = append(service, benchHTTP("http://"+clusterIP+"/"))

		// A Service with a cluster IP chosen beforehand, so that the
		// prober runs before it exists.
		ip := fmt.Sprintf("10.96.200.%d", 10+i)
		probe := sqlkubeCommand(ns, "bench", "http", "--url", "http://"+ip+"/", "--first-ok", "60s")
		var out strings.Builder
		probe.Stdout = &out
		if err := probe.Start(); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("first-%d", i)},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		created := time.Now()
		if _, err := cs.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
			_ = probe.Process.Kill()
			t.Fatal(err)
		}
		if err := probe.Wait(); err != nil {
			t.Fatalf("no first answer from %s: %v", ip, err)
		}
		at, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(out.String()), "first-ok "), 10, 64)
		if err != nil {
			t.Fatalf("bench http --first-ok printed %q", out.String())
		}
		firstAnswer = append(firstAnswer, time.Unix(0, at).Sub(created))
	}
	medianF := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
	sort.Slice(firstAnswer, func(i, j int) bool { return firstAnswer[i] < firstAnswer[j] })
	d, sv := medianF(direct), medianF(service)
	fmt.Printf("service bench (%d rounds, medians): pod IP %.0f req/s; cluster IP to 3 replicas %.0f req/s (%.2f×); Service creation to first answer %v (rounds %v)\n",
		rounds, d, sv, sv/d, firstAnswer[len(firstAnswer)/2].Round(time.Millisecond), firstAnswer)
}
