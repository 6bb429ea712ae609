package apiserver_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
)

// causes returns the field paths of a 422's causes.
func causes(t *testing.T, err error) []string {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422 Invalid", err)
	}
	var fields []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	return fields
}

func TestStrategy_PodDefaults(t *testing.T) {
	// Defaults only: DefaultTolerationSeconds would add tolerations.
	cfg, _ := newServerWith(t, apiserver.Config{DisableAdmissionPlugins: []string{"ServiceAccount", "DefaultTolerationSeconds"}})
	cs := kubernetes.NewForConfigOrDie(cfg)
	pod, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "web", Image: "nginx:1.27"}, {Name: "tools", Image: "busybox"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := pod.Spec
	if s.RestartPolicy != corev1.RestartPolicyAlways || s.DNSPolicy != corev1.DNSClusterFirst ||
		s.SchedulerName != corev1.DefaultSchedulerName || ptr.Deref(s.TerminationGracePeriodSeconds, 0) != 30 ||
		!ptr.Deref(s.EnableServiceLinks, false) || s.SecurityContext == nil {
		t.Errorf("pod spec defaults: %+v", s)
	}
	if got := []corev1.PullPolicy{s.Containers[0].ImagePullPolicy, s.Containers[1].ImagePullPolicy}; !slices.Equal(got, []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullAlways}) {
		t.Errorf("image pull policies %v, want IfNotPresent for a tag and Always for latest", got)
	}
	if c := s.Containers[0]; c.TerminationMessagePath != corev1.TerminationMessagePathDefault || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("container defaults: %+v", c)
	}
	if pod.Status.Phase != corev1.PodPending || pod.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("status %+v, want Pending and BestEffort", pod.Status)
	}
	if len(s.Tolerations) != 0 {
		t.Errorf("tolerations %v: those come from admission, not defaults", s.Tolerations)
	}
}

func TestStrategy_DeploymentDefaults(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	labels := map[string]string{"app": "web"}
	d, err := cs.AppsV1().Deployments("default").Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	quarter := intstr.FromString("25%")
	if ptr.Deref(d.Spec.Replicas, 0) != 1 || ptr.Deref(d.Spec.RevisionHistoryLimit, 0) != 10 ||
		ptr.Deref(d.Spec.ProgressDeadlineSeconds, 0) != 600 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		d.Spec.Strategy.RollingUpdate == nil || *d.Spec.Strategy.RollingUpdate.MaxSurge != quarter || *d.Spec.Strategy.RollingUpdate.MaxUnavailable != quarter {
		t.Errorf("deployment defaults: %+v", d.Spec)
	}
	if d.Generation != 1 || d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("generation %d, template restartPolicy %q", d.Generation, d.Spec.Template.Spec.RestartPolicy)
	}
}

func TestStrategy_Validation(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))

	t.Run("pod without image", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
		}, metav1.CreateOptions{})
		if got := causes(t, err); !slices.Contains(got, "spec.containers[0].image") {
			t.Errorf("causes %v, want spec.containers[0].image", got)
		}
	})
	t.Run("deployment selector not matching its template", func(t *testing.T) {
		_, err := cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "d"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "b"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
				},
			},
		}, metav1.CreateOptions{})
		if got := causes(t, err); !slices.Contains(got, "spec.template.metadata.labels") {
			t.Errorf("causes %v, want spec.template.metadata.labels", got)
		}
	})
	t.Run("service port out of range", func(t *testing.T) {
		_, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 70000}}},
		}, metav1.CreateOptions{})
		if got := causes(t, err); !slices.Contains(got, "spec.ports[0].port") {
			t.Errorf("causes %v, want spec.ports[0].port", got)
		}
		// Nothing was kept: the name is free and no cluster IP leaked.
		if _, err := cs.CoreV1().Services("default").Get(ctx, "s", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after a refused create: %v, want 404", err)
		}
	})
	t.Run("immutable configmap", func(t *testing.T) {
		cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "frozen"}, Immutable: ptr.To(true), Data: map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["k"] = "changed"
		_, err = cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
		if got := causes(t, err); !slices.Contains(got, "data") {
			t.Errorf("causes %v, want data", got)
		}
	})
	t.Run("pod status update keeps the spec", func(t *testing.T) {
		pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Spec.Containers[0].Image = "i:2"
		pod.Status.Phase = corev1.PodRunning
		got, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != corev1.PodRunning || got.Spec.Containers[0].Image != "i:1" {
			t.Errorf("after status update: phase %s image %s, want Running and i:1", got.Status.Phase, got.Spec.Containers[0].Image)
		}
	})
}

// warnings collects the Warning headers client-go receives.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func TestStrategy_Warnings(t *testing.T) {
	cfg := newServer(t)
	w := &warnings{}
	cfg.WarningHandler = w
	cs := kubernetes.NewForConfigOrDie(cfg)
	_, err := cs.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"beta.kubernetes.io/arch": "amd64"},
			Containers:   []corev1.Container{{Name: "c", Image: "i"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.ContainsFunc(w.msgs, func(m string) bool { return strings.Contains(m, "beta.kubernetes.io/arch") }) {
		t.Errorf("warnings %q, want the deprecated node label named", w.msgs)
	}
}
