package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/controllers/manager"
	"github.com/sqlkube/sqlkube/election"
)

// newAdmissionServer starts a server with every admission plugin and the
// controllers they rely on (default service accounts, quota status),
// and returns its client configuration.
func newAdmissionServer(t *testing.T) *rest.Config {
	t.Helper()
	cfg, api := newServerWith(t, apiserver.Config{DisableAdmissionPlugins: []string{}})
	// Kubernetes' service account and resource quota controllers, as
	// sqlkube server runs them.
	o, err := manager.NewOptions()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Parse([]string{"--controllers=serviceaccount-controller,resourcequota-controller", "--leader-elect=false"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- manager.Run(ctx, api.Loopback(), o, election.Policy{}) }()
	// Registered after the server's own cleanup: runs first.
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller manager: %v", err)
		}
	})
	return cfg
}

// newNamespace creates a namespace with labels and waits for its default
// service account.
func newNamespace(t *testing.T, cs kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the default service account of "+name, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
}

// eventually polls cond for up to 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// simplePod is a pod of one container, image only.
func simplePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
}

func TestAdmission_NamespaceLifecycle(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newAdmissionServer(t))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}

	_, err := cs.CoreV1().ConfigMaps("nowhere").Create(ctx, cm, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `namespaces "nowhere" not found`) {
		t.Fatalf("create in a missing namespace: %v, want 404 NotFound for the namespace", err)
	}

	newNamespace(t, cs, "doomed", nil)
	if err := cs.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// No namespace controller here: the namespace stays Terminating.
	_, err = cs.CoreV1().ConfigMaps("doomed").Create(ctx, cm, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) ||
		!strings.Contains(err.Error(), "unable to create new content in namespace doomed because it is being terminated") {
		t.Fatalf("create in a terminating namespace: %v, want 403 with a NamespaceTerminating cause", err)
	}

	for _, name := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "this namespace may not be deleted") {
			t.Errorf("delete %s: %v, want 403", name, err)
		}
		err = cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			t.Errorf("dry-run delete %s: %v, want 403", name, err)
		}
	}
}

func TestAdmission_ResourceQuota(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newAdmissionServer(t))
	newNamespace(t, cs, "quota", nil)
	quotas := cs.CoreV1().ResourceQuotas("quota")
	_, err := quotas.Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "compute"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := func() string {
		q, err := quotas.Get(ctx, "compute", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := q.Status.Hard[corev1.ResourcePods]; !ok {
			return "unset"
		}
		n := q.Status.Used[corev1.ResourcePods]
		return n.String()
	}
	// The quota controller sets status.hard (enforcement starts then).
	eventually(t, "the quota's status", func() bool { return used() == "0" })

	pods := cs.CoreV1().Pods("quota")
	if _, err := pods.Create(ctx, simplePod("one"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := used(); got != "1" {
		t.Fatalf("status.used.pods after one pod: %s, want 1", got)
	}
	if _, err := pods.Create(ctx, simplePod("dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run create within quota: %v", err)
	}
	if got := used(); got != "1" {
		t.Fatalf("status.used.pods after a dry run: %s, want 1 (dry runs are not charged)", got)
	}
	if _, err := pods.Create(ctx, simplePod("two"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = pods.Create(ctx, simplePod("three"), metav1.CreateOptions{})
	want := "exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2"
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("third pod: %v, want 403 %q", err, want)
	}
	if got := used(); got != "2" {
		t.Fatalf("status.used.pods: %s, want 2", got)
	}

	// Deleting a pod gives the room back (the controller recalculates).
	if err := pods.Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the quota to be released", func() bool { return used() == "1" })
	if _, err := pods.Create(ctx, simplePod("three"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod after a delete: %v", err)
	}
}

func TestAdmission_LimitRanger(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newAdmissionServer(t))
	newNamespace(t, cs, "limits", nil)
	_, err := cs.CoreV1().LimitRanges("limits").Create(ctx, &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "cpu"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:           corev1.LimitTypeContainer,
			Default:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
			DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Max:            corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := cs.CoreV1().Pods("limits")
	// The plugin reads LimitRanges from an informer (with a live lookup
	// when it has none for the namespace): retry until it applies.
	var pod *corev1.Pod
	eventually(t, "the limit range's defaults", func() bool {
		p, err := pods.Create(ctx, simplePod("defaulted"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		pod = p
		return p.Spec.Containers[0].Resources.Limits != nil
	})
	pod, err = pods.Create(ctx, simplePod("defaulted"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := pod.Spec.Containers[0].Resources
	if got := res.Requests[corev1.ResourceCPU]; got.String() != "100m" {
		t.Errorf("requests.cpu = %s, want 100m", got.String())
	}
	if got := res.Limits[corev1.ResourceCPU]; got.String() != "500m" {
		t.Errorf("limits.cpu = %s, want 500m", got.String())
	}
	if !strings.Contains(pod.Annotations["kubernetes.io/limit-ranger"], "cpu request for container app; cpu limit for container app") {
		t.Errorf("limit-ranger annotation: %q", pod.Annotations["kubernetes.io/limit-ranger"])
	}

	big := simplePod("big")
	big.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	_, err = pods.Create(ctx, big, metav1.CreateOptions{})
	want := "maximum cpu usage per Container is 1, but limit is 2"
	// LimitRanger answers 403 Forbidden, as in kube-apiserver.
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("pod over the max: %v, want 403 %q", err, want)
	}
}

func TestAdmission_PodSecurity(t *testing.T) {
	ctx := context.Background()
	cfg := newAdmissionServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	newNamespace(t, cs, "strict", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	newNamespace(t, cs, "lenient", map[string]string{"pod-security.kubernetes.io/warn": "baseline"})

	// Privileged containers are refused by validation already (as
	// kube-apiserver without --allow-privileged): host namespaces are
	// what baseline forbids here.
	privileged := func() *corev1.Pod {
		p := simplePod("priv")
		p.Spec.HostNetwork = true
		return p
	}
	_, err := cs.CoreV1().Pods("strict").Create(ctx, privileged(), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`) || !strings.Contains(err.Error(), "hostNetwork=true") {
		t.Fatalf("privileged pod in a restricted namespace: %v, want 403", err)
	}

	rec := &warnings{}
	wcfg := rest.CopyConfig(cfg)
	wcfg.WarningHandler = rec
	if _, err := kubernetes.NewForConfigOrDie(wcfg).CoreV1().Pods("lenient").Create(ctx, privileged(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("privileged pod in a warn-only namespace: %v", err)
	}
	rec.mu.Lock()
	got := strings.Join(rec.msgs, "\n")
	rec.mu.Unlock()
	if !strings.Contains(got, `would violate PodSecurity "baseline:latest"`) || !strings.Contains(got, "hostNetwork=true") {
		t.Fatalf("warnings: %q, want a baseline PodSecurity warning", got)
	}
}

func TestAdmission_Priority(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newAdmissionServer(t))
	newNamespace(t, cs, "prio", nil)
	classes := cs.SchedulingV1().PriorityClasses()
	if _, err := classes.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := cs.CoreV1().Pods("prio")
	create := func(name, class string) (*corev1.Pod, error) {
		p := simplePod(name)
		if name == "" {
			p.GenerateName = "plain-"
		}
		p.Spec.PriorityClassName = class
		return pods.Create(ctx, p, metav1.CreateOptions{})
	}
	// The plugin reads classes from an informer: wait until it has it.
	var pod *corev1.Pod
	eventually(t, "the priority class", func() bool {
		p, err := create("high", "high")
		pod = p
		return err == nil
	})
	if pod.Spec.Priority == nil || *pod.Spec.Priority != 1000 {
		t.Fatalf("priority from class high: %v, want 1000", pod.Spec.Priority)
	}
	pod, err := create("critical", "system-cluster-critical")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority != 2000000000 {
		t.Fatalf("priority from system-cluster-critical: %v, want 2000000000", pod.Spec.Priority)
	}
	if _, err := create("lost", "nope"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no PriorityClass with name nope was found") {
		t.Fatalf("unknown class: %v, want 403", err)
	}

	// A global default class applies to pods that name none.
	if _, err := classes.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Value: 10, GlobalDefault: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the default priority class", func() bool {
		p, err := create("", "") // a new name each time
		if err != nil {
			t.Fatal(err)
		}
		pod = p
		return p.Spec.PriorityClassName == "low"
	})
	if pod.Spec.Priority == nil || *pod.Spec.Priority != 10 {
		t.Fatalf("priority from the global default: %v, want 10", pod.Spec.Priority)
	}

	// Patches are admitted too: a second global default is refused.
	_, err = classes.Patch(ctx, "high", types.MergePatchType, []byte(`{"globalDefault":true}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PriorityClass low is already marked as default. Only one default can exist") {
		t.Fatalf("patching a second global default: %v, want 403", err)
	}
}

func TestAdmission_ServiceAccount(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newAdmissionServer(t))
	newNamespace(t, cs, "sa", nil)
	pods := cs.CoreV1().Pods("sa")
	pod, err := pods.Create(ctx, simplePod("p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.ServiceAccountName != "default" {
		t.Errorf("serviceAccountName = %q, want default", pod.Spec.ServiceAccountName)
	}
	var token *corev1.Volume
	for i, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			token = &pod.Spec.Volumes[i]
		}
	}
	if token == nil {
		t.Fatalf("no projected kube-api-access volume: %+v", pod.Spec.Volumes)
	}
	hasToken := false
	for _, src := range token.Projected.Sources {
		hasToken = hasToken || src.ServiceAccountToken != nil && src.ServiceAccountToken.Path == "token"
	}
	if !hasToken {
		t.Errorf("the projected volume has no service account token: %+v", token.Projected.Sources)
	}
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounted = mounted || m.Name == token.Name && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" && m.ReadOnly
	}
	if !mounted {
		t.Errorf("token volume not mounted: %+v", pod.Spec.Containers[0].VolumeMounts)
	}

	ghost := simplePod("ghost")
	ghost.Spec.ServiceAccountName = "ghost"
	_, err = pods.Create(ctx, ghost, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "error looking up service account sa/ghost") {
		t.Fatalf("pod with a missing service account: %v, want 403", err)
	}
}
