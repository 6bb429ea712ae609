package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// kubectlTableAccept is the Accept header of kubectl get.
const kubectlTableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// getTable GETs path as kubectl get does and decodes the Table, numbers
// in cells as int64 where they are whole.
func getTable(t *testing.T, cfg *rest.Config, path string) *metav1.Table {
	t.Helper()
	req, err := http.NewRequest("GET", cfg.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", kubectlTableAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	var tbl metav1.Table
	if err := utiljson.Unmarshal(body, &tbl); err != nil {
		t.Fatalf("GET %s: decoding %s: %v", path, body, err)
	}
	if tbl.Kind != "Table" {
		t.Fatalf("GET %s: got kind %q: %s", path, tbl.Kind, body)
	}
	return &tbl
}

// columnNames are the table's columns, the -o wide ones prefixed "wide:".
func columnNames(tbl *metav1.Table) []string {
	var names []string
	for _, c := range tbl.ColumnDefinitions {
		if c.Priority > 0 {
			names = append(names, "wide:"+c.Name)
		} else {
			names = append(names, c.Name)
		}
	}
	return names
}

// anAge stands, in wanted cells, for the age of an object just created.
type anAge struct{}

var justCreated = regexp.MustCompile(`^[0-9]+s$`)

// checkRows compares the rows (by their cells, keyed by the cell at
// keyColumn) with want, ages aside.
func checkRows(t *testing.T, tbl *metav1.Table, keyColumn int, want map[string][]any) {
	t.Helper()
	if len(tbl.Rows) != len(want) {
		t.Errorf("got %d rows, want %d", len(tbl.Rows), len(want))
	}
	for _, row := range tbl.Rows {
		key := fmt.Sprint(row.Cells[keyColumn])
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected row %v", row.Cells)
			continue
		}
		got := append([]any(nil), row.Cells...)
		for i, c := range w {
			if _, isAge := c.(anAge); isAge && i < len(got) {
				if s, _ := got[i].(string); !justCreated.MatchString(s) {
					t.Errorf("%s: cell %d is %#v, want the age of a new object", key, i, got[i])
				}
				got[i] = anAge{}
			}
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s: cells (-want +got):\n%s", key, diff)
		}
	}
}

func checkColumns(t *testing.T, tbl *metav1.Table, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, columnNames(tbl)); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
}

// ago is a time d before now, at the second precision the API keeps.
func ago(d time.Duration) metav1.Time {
	return metav1.NewTime(time.Now().Add(-d).Truncate(time.Second))
}

func TestTable_Pods(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	pods := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("default")
	always := corev1.ContainerRestartPolicyAlways
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(time.Hour)}}
	exited := func(finished metav1.Time) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: finished}}
	}
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	containers := func(names ...string) []corev1.Container {
		var cs []corev1.Container
		for _, n := range names {
			cs = append(cs, corev1.Container{Name: n, Image: n + ":1"})
		}
		return cs
	}
	cases := []struct {
		pod    corev1.Pod
		status *corev1.PodStatus
		want   []any
	}{{
		// Running, one container ready with restarts, the other crash
		// looping; the last restart ended 30 minutes ago.
		pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{
			NodeName: "node-1", Containers: containers("app", "log"),
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/lb-ready"}},
		}},
		status: &corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.244.1.7", PodIPs: []corev1.PodIP{{IP: "10.244.1.7"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: "example.com/lb-ready", Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Ready: true, State: running, RestartCount: 2, LastTerminationState: exited(ago(45 * time.Minute))},
				{Name: "log", State: waiting("CrashLoopBackOff"), RestartCount: 3, LastTerminationState: exited(ago(30 * time.Minute))},
			},
		},
		want: []any{"web", "1/2", "CrashLoopBackOff", "5 (30m ago)", anAge{}, "10.244.1.7", "node-1", "<none>", "1/1"},
	}, {
		// The first of two init containers is done, the second runs.
		pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "init"}, Spec: corev1.PodSpec{
			InitContainers: containers("migrate", "seed"), Containers: containers("app"),
		}},
		status: &corev1.PodStatus{
			Phase: corev1.PodPending, NominatedNodeName: "node-2",
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "migrate", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}},
				{Name: "seed", State: running},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: waiting("PodInitializing")}},
		},
		want: []any{"init", "0/1", "Init:1/2", "0", anAge{}, "<none>", "<none>", "node-2", "<none>"},
	}, {
		pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "init-pull"}, Spec: corev1.PodSpec{
			InitContainers: containers("fetch"), Containers: containers("app"),
		}},
		status: &corev1.PodStatus{
			Phase:                 corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "fetch", State: waiting("ErrImagePull")}},
		},
		want: []any{"init-pull", "0/1", "Init:ErrImagePull", "0", anAge{}, "<none>", "<none>", "<none>", "<none>"},
	}, {
		// A sidecar (init container that keeps running) counts as a
		// container, and its restarts count.
		pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sidecar"}, Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: &always}}, Containers: containers("app"),
		}},
		status: &corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{
				Name: "proxy", Started: ptr.To(true), Ready: true, State: running, RestartCount: 1, LastTerminationState: exited(ago(30 * time.Minute)),
			}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, State: running}},
		},
		want: []any{"sidecar", "2/2", "Running", "1 (30m ago)", anAge{}, "<none>", "<none>", "<none>", "<none>"},
	}, {
		pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done"}, Spec: corev1.PodSpec{Containers: containers("task")}},
		status: &corev1.PodStatus{
			Phase:             corev1.PodSucceeded,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "task", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}},
		},
		want: []any{"done", "0/1", "Completed", "0", anAge{}, "<none>", "<none>", "<none>", "<none>"},
	}, {
		// Killed by a signal, no reason given.
		pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "killed"}, Spec: corev1.PodSpec{Containers: containers("task")}},
		status: &corev1.PodStatus{
			Phase:             corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "task", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Signal: 9}}}},
		},
		want: []any{"killed", "0/1", "Signal:9", "0", anAge{}, "<none>", "<none>", "<none>", "<none>"},
	}, {
		pod:  corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, Spec: corev1.PodSpec{Containers: containers("app")}},
		want: []any{"fresh", "0/1", "Pending", "0", anAge{}, "<none>", "<none>", "<none>", "<none>"},
	}}
	want := map[string][]any{}
	for _, tc := range cases {
		created, err := pods.Create(ctx, &tc.pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tc.status != nil {
			created.Status = *tc.status
			if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		want[tc.pod.Name] = tc.want
	}

	tbl := getTable(t, cfg, "/api/v1/namespaces/default/pods")
	checkColumns(t, tbl, "Name", "Ready", "Status", "Restarts", "Age", "wide:IP", "wide:Node", "wide:Nominated Node", "wide:Readiness Gates")
	checkRows(t, tbl, 0, want)
	for _, row := range tbl.Rows {
		var wantConds []metav1.TableRowCondition
		switch row.Cells[0] {
		case "done":
			wantConds = []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "The pod has completed successfully."}}
		case "killed":
			wantConds = []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: "Failed", Message: "The pod failed."}}
		}
		if diff := cmp.Diff(wantConds, row.Conditions); diff != "" {
			t.Errorf("%s: row conditions (-want +got):\n%s", row.Cells[0], diff)
		}
		if !strings.Contains(string(row.Object.Raw), `"kind":"PartialObjectMetadata"`) {
			t.Errorf("%s: row object is %s, want the metadata", row.Cells[0], row.Object.Raw)
		}
	}
}

func TestTable_Nodes(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	nodes := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	n, err := nodes.Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Labels: map[string]string{
			"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "ingress", "kubernetes.io/os": "linux",
		}},
		Spec: corev1.NodeSpec{Unschedulable: true},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "cp-1"}, {Type: corev1.NodeInternalIP, Address: "172.18.0.2"}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: "v1.34.2", OSImage: "Debian GNU/Linux 12 (bookworm)", KernelVersion: "6.8.0-45-generic", ContainerRuntimeVersion: "containerd://2.1.4",
		},
	}
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	tbl := getTable(t, cfg, "/api/v1/nodes")
	checkColumns(t, tbl, "Name", "Status", "Roles", "Age", "Version",
		"wide:Internal-IP", "wide:External-IP", "wide:OS-Image", "wide:Kernel-Version", "wide:Container-Runtime")
	checkRows(t, tbl, 0, map[string][]any{
		"cp-1": {"cp-1", "Ready,SchedulingDisabled", "control-plane,ingress", anAge{}, "v1.34.2",
			"172.18.0.2", "<none>", "Debian GNU/Linux 12 (bookworm)", "6.8.0-45-generic", "containerd://2.1.4"},
		"new": {"new", "Unknown", "<none>", anAge{}, "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"},
	})
}

func TestTable_Services(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	svcs := kubernetes.NewForConfigOrDie(cfg).CoreV1().Services("default")
	for _, svc := range []*corev1.Service{{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.12.34", ClusterIPs: []string{"10.96.12.34"},
			Selector: map[string]string{"tier": "front", "app": "web"},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080, Protocol: corev1.ProtocolTCP},
				{Name: "dns", Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP},
			},
		},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.50", ClusterIPs: []string{"10.96.0.50"},
			AllocateLoadBalancerNodePorts: ptrBool(false),
			Ports:                         []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}},
		},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
	}} {
		if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tbl := getTable(t, cfg, "/api/v1/namespaces/default/services")
	checkColumns(t, tbl, "Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "wide:Selector")
	checkRows(t, tbl, 0, map[string][]any{
		"web": {"web", "NodePort", "10.96.12.34", "<none>", "80:30080/TCP,53:30053/UDP", anAge{}, "app=web,tier=front"},
		"lb":  {"lb", "LoadBalancer", "10.96.0.50", "<pending>", "443/TCP", anAge{}, "<none>"},
		"ext": {"ext", "ExternalName", "<none>", "db.example.com", "<none>", anAge{}, "<none>"},
	})
}

func TestTable_Workloads(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "web", Image: "nginx:1.27"}, {Name: "log", Image: "busybox:1.36"},
		}},
	}

	deploys := cs.AppsV1().Deployments("default")
	d, err := deploys.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: template,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}
	if _, err := deploys.UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tbl := getTable(t, cfg, "/apis/apps/v1/namespaces/default/deployments")
	checkColumns(t, tbl, "Name", "Ready", "Up-to-date", "Available", "Age", "wide:Containers", "wide:Images", "wide:Selector")
	checkRows(t, tbl, 0, map[string][]any{
		"web": {"web", "2/3", int64(3), int64(2), anAge{}, "web,log", "nginx:1.27,busybox:1.36", "app=web"},
	})

	jobs := cs.BatchV1().Jobs("default")
	j, err := jobs.Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate"},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1), ManualSelector: ptr.To(true),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"job-name": "migrate"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job-name": "migrate"}},
				Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "migrate", Image: "migrate:v2"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := ago(time.Hour)
	end := metav1.NewTime(start.Add(3*time.Minute + 20*time.Second))
	j.Status = batchv1.JobStatus{
		StartTime: &start, CompletionTime: &end, Succeeded: 1,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
		},
	}
	if _, err := jobs.UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A job just started: parallel, no completion count.
	// Job pods may not restart Always; the selector is the server's.
	jobTemplate := *template.DeepCopy()
	jobTemplate.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	queue, err := jobs.Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "queue"},
		Spec:       batchv1.JobSpec{Parallelism: ptr.To[int32](4), Template: jobTemplate},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	queueSelector := metav1.FormatLabelSelector(queue.Spec.Selector)
	if !strings.Contains(queueSelector, "controller-uid="+string(queue.UID)) {
		t.Fatalf("generated job selector %q does not name the job's uid", queueSelector)
	}
	tbl = getTable(t, cfg, "/apis/batch/v1/namespaces/default/jobs")
	checkColumns(t, tbl, "Name", "Status", "Completions", "Duration", "Age", "wide:Containers", "wide:Images", "wide:Selector")
	checkRows(t, tbl, 0, map[string][]any{
		"migrate": {"migrate", "Complete", "1/1", "3m20s", anAge{}, "migrate", "migrate:v2", "job-name=migrate"},
		"queue":   {"queue", "Running", "0/1 of 4", "", anAge{}, "web,log", "nginx:1.27,busybox:1.36", queueSelector},
	})

	cronJobs := cs.BatchV1().CronJobs("default")
	cj, err := cronJobs.Create(ctx, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "report"},
		Spec: batchv1.CronJobSpec{
			Schedule: "*/15 * * * *", TimeZone: ptr.To("Europe/Berlin"), Suspend: ptr.To(false),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{{Name: "report", Image: "report:1"}}},
			}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := ago(10 * time.Hour)
	cj.Status = batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Kind: "Job", Name: "report-29000000"}}, LastScheduleTime: &last}
	if _, err := cronJobs.UpdateStatus(ctx, cj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tbl = getTable(t, cfg, "/apis/batch/v1/namespaces/default/cronjobs/report")
	checkColumns(t, tbl, "Name", "Schedule", "Timezone", "Suspend", "Active", "Last Schedule", "Age", "wide:Containers", "wide:Images", "wide:Selector")
	checkRows(t, tbl, 0, map[string][]any{
		"report": {"report", "*/15 * * * *", "Europe/Berlin", "False", int64(1), "10h", anAge{}, "report", "report:1", "<none>"},
	})
}

func TestTable_RoleBindingWithoutObject(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	if _, err := kubernetes.NewForConfigOrDie(cfg).RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "editors"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "devs"},
			{Kind: rbacv1.ServiceAccountKind, Namespace: "ci", Name: "builder"},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tbl := getTable(t, cfg, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/editors?includeObject=None")
	checkColumns(t, tbl, "Name", "Role", "Age", "wide:Users", "wide:Groups", "wide:ServiceAccounts")
	checkRows(t, tbl, 0, map[string][]any{
		"editors": {"editors", "ClusterRole/edit", anAge{}, "alice, bob", "devs", "ci/builder"},
	})
	if raw := string(tbl.Rows[0].Object.Raw); raw != "" && raw != "null" {
		t.Errorf("includeObject=None: row carries %s", raw)
	}
}

// TestTable_EveryKind: every served resource prints a table whose columns
// are well formed and whose rows, for a minimal object, have a cell of the
// column's type for each column.
func TestTable_EveryKind(t *testing.T) {
	ctx := context.Background()
	cfg := newServer(t)
	lists, err := kubernetes.NewForConfigOrDie(cfg).Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	seen := 0
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue // subresources, and the create-only bindings
			}
			seen++
			// Names differ per resource: some share storage (core and
			// events.k8s.io events).
			name := fmt.Sprintf("table-minimal-%d", seen)
			t.Run(r.Kind, func(t *testing.T) {
				res := dyn.Resource(gv.WithResource(r.Name))
				path := "/apis/" + gv.String()
				if gv.Group == "" {
					path = "/api/" + gv.Version
				}
				var ri dynamic.ResourceInterface = res
				if r.Namespaced {
					ri, path = res.Namespace("default"), path+"/namespaces/default"
				}
				path += "/" + r.Name + "?fieldSelector=metadata.name%3D" + name
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": gv.String(), "kind": r.Kind, "metadata": map[string]any{"name": name},
				}}
				rows := 1
				if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
					t.Logf("a minimal %s is refused (%v); checking the columns only", r.Kind, err)
					rows = 0
				}
				tbl := getTable(t, cfg, path)
				named := false
				for _, c := range tbl.ColumnDefinitions {
					// kube-apiserver's own RuntimeClass printer, served
					// unchanged, leaves Handler undescribed.
					undescribed := r.Kind == "RuntimeClass" && c.Name == "Handler"
					if c.Name == "" || (c.Description == "" && !undescribed) || !map[string]bool{"string": true, "integer": true, "boolean": true, "date": true}[c.Type] {
						t.Errorf("column %+v lacks a name, type or description", c)
					}
					named = named || c.Name == "Name" && c.Format == "name"
				}
				// kube-apiserver's own StorageVersionMigration printer,
				// served unchanged, gives its Name column no format.
				if !named && r.Kind != "StorageVersionMigration" {
					t.Errorf("no Name column of format name: %+v", tbl.ColumnDefinitions)
				}
				if len(tbl.Rows) != rows {
					t.Fatalf("got %d rows, want %d", len(tbl.Rows), rows)
				}
				for _, row := range tbl.Rows {
					// kube-apiserver's own IPAddress printer, served
					// unchanged, prints its age beyond its two columns.
					if r.Kind == "IPAddress" && len(row.Cells) == len(tbl.ColumnDefinitions)+1 {
						row.Cells = row.Cells[:len(tbl.ColumnDefinitions)]
					}
					if len(row.Cells) != len(tbl.ColumnDefinitions) {
						t.Fatalf("%d cells %v for %d columns", len(row.Cells), row.Cells, len(tbl.ColumnDefinitions))
					}
					for i, c := range tbl.ColumnDefinitions {
						var ok bool
						switch c.Type {
						case "integer":
							_, ok = row.Cells[i].(int64)
						case "boolean":
							_, ok = row.Cells[i].(bool)
						default:
							_, ok = row.Cells[i].(string)
						}
						if !ok {
							t.Errorf("column %s (%s): cell %#v", c.Name, c.Type, row.Cells[i])
						}
					}
				}
			})
		}
	}
	if seen < 20 {
		t.Fatalf("only %d resources discovered", seen)
	}
}

func ptrBool(b bool) *bool { return &b }

// As kube-apiserver's handlers: a Table only from resources that can
// print one (not the reviews, which have no table convertor) and only in
// JSON or YAML; a request whose Accept header offers nothing else the
// answer can be written in is 406 Not Acceptable before anything is done.
func TestTable_NotAcceptable(t *testing.T) {
	cfg := newServer(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	do := func(method, path, accept, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, cfg.Host+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const ssar = `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/","verb":"get"}}}`
	const cm = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"}}`
	for _, tc := range []struct {
		name, method, path, accept, body string
		want                             int
	}{
		{"review as Table", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", table, ssar, http.StatusNotAcceptable},
		{"review as Table v1beta1", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json;as=Table;v=v1beta1;g=meta.k8s.io", ssar, http.StatusNotAcceptable},
		{"review as Table or JSON", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", table + ",application/json", ssar, http.StatusCreated},
		{"pods as a protobuf Table", "GET", "/api/v1/namespaces/default/pods", "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io", "", http.StatusNotAcceptable},
		{"pods as YAML Table", "GET", "/api/v1/namespaces/default/pods", "application/yaml;as=Table;v=v1;g=meta.k8s.io", "", http.StatusOK},
		{"pods as an unknown kind", "GET", "/api/v1/namespaces/default/pods", "application/json;as=Unknown;v=v1;g=meta.k8s.io", "", http.StatusNotAcceptable},
		{"pods as HTML", "GET", "/api/v1/namespaces/default/pods", "text/html", "", http.StatusNotAcceptable},
		{"configmap create as an unknown kind", "POST", "/api/v1/namespaces/default/configmaps", "application/json;as=Unknown;v=v1;g=meta.k8s.io", fmt.Sprintf(cm, "refused"), http.StatusNotAcceptable},
		{"configmap create as Table", "POST", "/api/v1/namespaces/default/configmaps", table, fmt.Sprintf(cm, "printed"), http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(tc.method, tc.path, tc.accept, tc.body)
			if code != tc.want {
				t.Errorf("%s %s (Accept %s): %d %.300s, want %d", tc.method, tc.path, tc.accept, code, body, tc.want)
			}
			if code == http.StatusNotAcceptable && !strings.Contains(body, `"reason":"NotAcceptable"`) {
				t.Errorf("406 without a NotAcceptable Status: %s", body)
			}
		})
	}
	// The refused create did nothing.
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "refused", metav1.GetOptions{}); err == nil {
		t.Error("a create answered 406 stored its object")
	}
}
