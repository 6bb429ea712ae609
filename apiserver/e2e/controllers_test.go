package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestKubectl_Controllers runs Kubernetes' workload controllers in
// `sqlkube server --fake-nodes 2` through kubectl: a DaemonSet (also on a
// node added later), Jobs, a CronJob, a StatefulSet and a Service's
// endpoints. Each scenario has a namespace of its own; all but the
// DaemonSet's run in parallel.
func TestKubectl_Controllers(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	s := startCommand(t, t.TempDir(), "server", "--fake-nodes", "2")
	newNamespace := func(t *testing.T, ns string) {
		t.Helper()
		s.mustKubectl(t, bin, "create", "namespace", ns)
		// Pods need the default service account, which a controller
		// makes.
		s.waitKubectl(t, bin, "serviceaccount/default", "-n", ns, "get", "serviceaccount", "default", "-o", "name")
	}
	dsNodes := []string{"-n", "ds", "get", "pods", "-l", "app=ds", "--field-selector=status.phase=Running", "-o", "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}"}
	sortedLines := func(t *testing.T, args []string) string {
		out, _ := s.kubectl(t, bin, args...)
		lines := strings.Fields(out)
		slices.Sort(lines)
		return strings.Join(lines, " ")
	}

	t.Run("DaemonSet", func(t *testing.T) {
		newNamespace(t, "ds")
		s.apply(t, bin, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: ds}
spec:
  selector: {matchLabels: {app: ds}}
  template:
    metadata: {labels: {app: ds}}
    spec:
      containers: [{name: c, image: nginx}]
`)
		until(t, commandTimeout, "a DaemonSet pod running on fake-0 and fake-1", func() (bool, error) {
			return sortedLines(t, dsNodes) == "fake-0 fake-1", nil
		})
	})
	// The later node lives until every scenario has ended: pods of the
	// others may be bound to it.
	startSqlkube(t, "node", "--fake", "--count", "1", "--name-prefix", "late-", "--kubeconfig", s.kubeconfig)
	t.Run("DaemonSetLateNode", func(t *testing.T) {
		until(t, commandTimeout, "a DaemonSet pod running on late-0 too", func() (bool, error) {
			return sortedLines(t, dsNodes) == "fake-0 fake-1 late-0", nil
		})
		s.waitKubectl(t, bin, "3 3 3", "-n", "ds", "get", "daemonset", "ds", "-o", "jsonpath={.status.desiredNumberScheduled} {.status.currentNumberScheduled} {.status.numberReady}")
	})

	t.Run("Jobs", func(t *testing.T) {
		t.Parallel()
		ns := "jobs"
		newNamespace(t, ns)
		s.apply(t, bin, `apiVersion: batch/v1
kind: Job
metadata: {name: five, namespace: jobs}
spec:
  completions: 5
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: failing, namespace: jobs}
spec:
  backoffLimit: 1
  template:
    metadata: {annotations: {fake.sqlkube.io/fail-after: 100ms}}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: indexed, namespace: jobs}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: ttl, namespace: jobs}
spec:
  ttlSecondsAfterFinished: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
`)
		s.mustKubectl(t, bin, "-n", ns, "wait", "--for=condition=complete", "job/five", "job/indexed", "--timeout=60s")
		if out := s.mustKubectl(t, bin, "-n", ns, "get", "job", "five", "-o", "jsonpath={.status.succeeded}"); out != "5" {
			t.Fatalf("job five: %s pods succeeded, want 5", out)
		}
		if out := s.mustKubectl(t, bin, "-n", ns, "get", "job", "indexed", "-o", "jsonpath={.status.succeeded} {.status.completedIndexes}"); out != "3 0-2" {
			t.Fatalf("indexed job: succeeded, completedIndexes = %q, want \"3 0-2\"", out)
		}
		if out := s.mustKubectl(t, bin, "-n", ns, "get", "pods", "-l", "job-name=indexed", "-o", `jsonpath={range .items[*]}{.metadata.annotations.batch\.kubernetes\.io/job-completion-index}{"\n"}{end}`); !slices.Equal(sortedFields(out), []string{"0", "1", "2"}) {
			t.Fatalf("indexed job's pods have completion indexes %q", out)
		}
		// Two failed pods (the first and one retry, after the Job
		// controller's 10s back-off), then the Job fails.
		s.mustKubectl(t, bin, "-n", ns, "wait", "--for=condition=failed", "job/failing", "--timeout=60s")
		if out := s.mustKubectl(t, bin, "-n", ns, "get", "job", "failing", "-o", `jsonpath={.status.failed} {.status.conditions[?(@.type=="Failed")].reason}`); out != "2 BackoffLimitExceeded" {
			t.Fatalf("failing job: failed, reason = %q, want \"2 BackoffLimitExceeded\"", out)
		}
		// The TTL controller deletes the finished Job, the garbage
		// collector its pod.
		s.waitKubectl(t, bin, "", "-n", ns, "get", "job,pods", "-l", "job-name=ttl", "-o", "name")
		if _, err := s.kubectl(t, bin, "-n", ns, "get", "job", "ttl"); err == nil || !strings.Contains(err.Error(), "NotFound") {
			t.Fatalf("finished job with ttlSecondsAfterFinished: 1 still there (%v)", err)
		}
	})

	t.Run("CronJob", func(t *testing.T) {
		t.Parallel()
		ns := "cron"
		newNamespace(t, ns)
		s.apply(t, bin, `apiVersion: batch/v1
kind: CronJob
metadata: {name: tick, namespace: cron}
spec:
  schedule: "* * * * *"
  successfulJobsHistoryLimit: 1
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
`)
		// A Job made by hand from the CronJob is its too, and the oldest
		// when the scheduled one finishes: the history limit removes it.
		s.mustKubectl(t, bin, "-n", ns, "create", "job", "by-hand", "--from=cronjob/tick")
		s.mustKubectl(t, bin, "-n", ns, "wait", "--for=condition=complete", "job/by-hand", "--timeout=60s")
		var last string
		until(t, 2*time.Minute, "a scheduled Job of the CronJob completes and the history limit keeps only it", func() (bool, error) {
			out, err := s.kubectl(t, bin, "-n", ns, "get", "jobs", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].name} {.status.succeeded}{"\n"}{end}`)
			last = strings.TrimSpace(out)
			lines := strings.Split(last, "\n")
			return len(lines) == 1 && strings.HasPrefix(lines[0], "tick-") && strings.HasSuffix(lines[0], " tick 1"), err
		})
		sched := s.mustKubectl(t, bin, "-n", ns, "get", "cronjob", "tick", "-o", "jsonpath={.status.lastScheduleTime} {.status.lastSuccessfulTime}")
		parts := strings.Fields(sched)
		if len(parts) != 2 {
			t.Fatalf("cronjob status: %q", sched)
		}
		at, err := time.Parse(time.RFC3339, parts[0])
		if err != nil || at.Second() != 0 {
			t.Fatalf("lastScheduleTime %q: not on a minute (%v)", parts[0], err)
		}
		// The scheduled Job is named after its schedule time in minutes.
		if want := fmt.Sprintf("tick-%d ", at.Unix()/60); !strings.HasPrefix(last, want) {
			t.Fatalf("jobs %q: want the one scheduled at %s, %s…", last, at, want)
		}
	})

	t.Run("StatefulSet", func(t *testing.T) {
		t.Parallel()
		ns := "sts"
		newNamespace(t, ns)
		var pvs strings.Builder
		for i := range 3 {
			fmt.Fprintf(&pvs, `---
apiVersion: v1
kind: PersistentVolume
metadata: {name: sts-pv-%d}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /tmp/sts-pv-%d}
`, i, i)
		}
		s.apply(t, bin, pvs.String())
		order := watchStatefulOrder(t, s, ns)
		s.apply(t, bin, `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: sts}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`)
		// Three pods one after the other, each waiting for its claim to
		// bind: under the parallel scenarios on 2 cores this once took
		// more than a minute, so the wait is longer than one command's and
		// a failure shows where the set stood. It is longer than the
		// scheduler's 5-minute flush of unschedulable pods too: the
		// v1.34 scheduler requeues a pod on its claim's update through one
		// informer handler while its volume binder reads the claim from an
		// assume cache fed by another, so under load it can retry before
		// that cache has the bound claim and then wait for the flush (CI
		// once saw web-0 tried twice, then not again for 3 minutes).
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := s.kubectl(t, bin, "-n", ns, "get", "statefulset,pods,pvc,events", "-o", "wide")
				pv, _ := s.kubectl(t, bin, "get", "pv", "-o", "wide")
				// What the scheduler and the elections said (a scheduler
				// that never retried web-0 once its claim was bound failed
				// this once in CI).
				log := s.logLines(60, "web-0", "data-web-0", "leader", "lease", "Lease", "scheduler")
				t.Logf("namespace %s at the failure:\n%s\n%s\nserver log:\n%s", ns, out, pv, log)
			}
		})
		until(t, 6*time.Minute, "StatefulSet web with 3 ready replicas", func() (bool, error) {
			out, err := s.kubectl(t, bin, "-n", ns, "get", "statefulset", "web", "-o", "jsonpath={.status.readyReplicas}")
			return out == "3", err
		})
		s.waitKubectl(t, bin, "web-0 Running web-1 Running web-2 Running", "-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase} {end}")
		if got := order(); !slices.Equal(got, []string{"web-0", "web-1", "web-2"}) {
			t.Fatalf("pods created in order %v, each before the one before it was ready", got)
		}
		out := s.mustKubectl(t, bin, "-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.creationTimestamp} {end}")
		if ts := strings.Fields(out); len(ts) != 3 || ts[0] > ts[1] || ts[1] > ts[2] {
			t.Fatalf("creation timestamps of web-0, web-1, web-2: %q", out)
		}
		s.waitKubectl(t, bin, "data-web-0 Bound data-web-1 Bound data-web-2 Bound", "-n", ns, "get", "pvc", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase} {end}")
		for i := range 3 {
			claim := s.mustKubectl(t, bin, "-n", ns, "get", "pod", fmt.Sprintf("web-%d", i), "-o", `jsonpath={.spec.volumes[?(@.name=="data")].persistentVolumeClaim.claimName}`)
			if want := fmt.Sprintf("data-web-%d", i); claim != want {
				t.Fatalf("web-%d mounts claim %q, want %q", i, claim, want)
			}
		}
	})

	t.Run("ServiceEndpoints", func(t *testing.T) {
		t.Parallel()
		ns := "svc"
		newNamespace(t, ns)
		k := func(args ...string) string { return s.mustKubectl(t, bin, append([]string{"-n", ns}, args...)...) }
		k("create", "deployment", "web", "--image=nginx", "--replicas=3")
		k("expose", "deployment", "web", "--port=80")
		k("rollout", "status", "deployment/web", "--timeout=60s")
		podNames := func() []string {
			return sortedFields(k("get", "pods", "-l", "app=web", "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"))
		}
		var pods []string
		until(t, commandTimeout, "3 running pods", func() (bool, error) { pods = podNames(); return len(pods) == 3, nil })
		// ready and notReady endpoints of the Service's EndpointSlices and
		// of its Endpoints, by pod name.
		endpointSlices := func() string {
			out, _ := s.kubectl(t, bin, "-n", ns, "get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", `jsonpath={range .items[*].endpoints[*]}{.targetRef.name}={.conditions.ready}{"\n"}{end}`)
			return strings.Join(sortedFields(out), " ")
		}
		endpoints := func() string {
			out, _ := s.kubectl(t, bin, "-n", ns, "get", "endpoints", "web", "-o", `jsonpath={range .subsets[*].addresses[*]}{.targetRef.name}=true{"\n"}{end}{range .subsets[*].notReadyAddresses[*]}{.targetRef.name}=false{"\n"}{end}`)
			return strings.Join(sortedFields(out), " ")
		}
		want := func(ready map[string]bool) string {
			var out []string
			for name, r := range ready {
				out = append(out, fmt.Sprintf("%s=%t", name, r))
			}
			slices.Sort(out)
			return strings.Join(out, " ")
		}
		waitEndpoints := func(what, w string) {
			t.Helper()
			until(t, commandTimeout, what, func() (bool, error) { return endpointSlices() == w && endpoints() == w, nil })
		}
		waitEndpoints("EndpointSlices and Endpoints list the 3 ready pods", want(map[string]bool{pods[0]: true, pods[1]: true, pods[2]: true}))

		// pods/status with the admin credential, as a kubelet whose
		// readiness probe fails would write it. The simulated node
		// writes a pod's status when it starts it and when its
		// containers end, so it leaves the condition as set here.
		k("patch", "pod", pods[0], "--subresource=status", "-p", `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`)
		waitEndpoints("the not-ready pod is listed as not ready", want(map[string]bool{pods[0]: false, pods[1]: true, pods[2]: true}))

		k("delete", "pod", pods[1])
		var replacement string
		until(t, commandTimeout, "a replacement pod", func() (bool, error) {
			for _, p := range podNames() {
				if !slices.Contains(pods, p) {
					replacement = p
					return true, nil
				}
			}
			return false, nil
		})
		waitEndpoints("the deleted pod is dropped, its replacement listed", want(map[string]bool{pods[0]: false, pods[2]: true, replacement: true}))
	})
}

func sortedFields(s string) []string {
	f := strings.Fields(s)
	slices.Sort(f)
	return f
}

// watchStatefulOrder watches ns's pods until t ends; order returns the
// names of the pods in the order they were created, leaving out any pod
// created while the one before it (web-N-1 for web-N) was not ready.
func watchStatefulOrder(t *testing.T, s *server, ns string) (order func() []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := s.clientset(t).CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ready := map[string]bool{}
	var created []string
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			if ev.Type == watch.Added {
				var i int
				if _, err := fmt.Sscanf(p.Name, "web-%d", &i); err == nil && (i == 0 || ready[fmt.Sprintf("web-%d", i-1)]) {
					created = append(created, p.Name)
				}
			}
			ready[p.Name] = ev.Type != watch.Deleted && podReady(p)
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(created)
	}
}
