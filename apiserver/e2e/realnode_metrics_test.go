package e2e

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sqlkube/sqlkube/internal/stablemetrics"
)

// kubeletOnEveryPath are the families the kubelet serves on more than
// one of its paths, as upstream's does: the process start time, which it
// also registers in /metrics/probes' own registry.
var kubeletOnEveryPath = map[string]bool{"process_start_time_seconds": true}

// kubeletPaths are where the kubelet serves its families: upstream's
// /metrics, /metrics/resource (the resource-usage families) and
// /metrics/probes.
var kubeletPaths = []string{"/metrics", "/metrics/resource", "/metrics/probes"}

// TestRealNode_KubeletMetrics checks that the server's node's kubelet
// serves every stable and beta metric Kubernetes declares for the kubelet
// (stablemetrics.Kubelet) on its endpoint, with its type, labels and
// buckets, read as Prometheus reads it through the API server's
// nodes/proxy, after a pod with readiness and liveness probes and a
// volume has started; and that no family is served on two of its paths
// (but kubeletOnEveryPath).
func TestRealNode_KubeletMetrics(t *testing.T) {
	requireNodeHost(t)
	declared, source, ok := stablemetrics.List(t, stablemetrics.Kubelet)
	if !ok {
		t.Skip("k8s.io/kubernetes is not in the module cache")
	}
	t.Logf("the kubelet's from %s", source)
	node := "e2e-metrics"
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), node)
	cs := s.clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}
	_, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probed"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: testImage, Command: []string{"sleep", "3600"},
				ReadinessProbe: probe, LivenessProbe: probe,
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	want := declared // every one: the scenario produces them all
	// The resource families come from the runtime's stats, and the
	// probes' once they have run.
	var all map[string]*dto.MetricFamily
	var missing, twice []string
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		all, missing, twice = map[string]*dto.MetricFamily{}, nil, nil
		for _, path := range kubeletPaths {
			body, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + node + "/proxy" + path).DoRaw(ctx)
			if err != nil {
				t.Logf("GET %s through nodes/proxy: %v", path, err)
				return false, nil
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
			if err != nil {
				return false, err
			}
			for name := range mfs {
				if all[name] != nil && !kubeletOnEveryPath[name] {
					twice = append(twice, name+" (again on "+path+")")
				}
			}
			maps.Copy(all, mfs)
		}
		for _, m := range want {
			if all[m.Name] == nil || (m.Type == "Custom" && len(all[m.Name].GetMetric()) == 0) {
				missing = append(missing, m.Name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("the kubelet does not serve %v: %v", missing, err)
	}
	if len(twice) > 0 {
		t.Errorf("families served on two of the kubelet's paths: %v", twice)
	}
	t.Logf("checking %d metrics", len(want))
	for _, m := range want {
		stablemetrics.Check(t, m, all[m.Name])
	}
	// The probed pod's own series: its probes and its container's usage.
	for _, c := range []struct{ family, label, value string }{
		{"prober_probe_total", "pod", "probed"},
		{"container_cpu_usage_seconds_total", "pod", "probed"},
		{"pod_memory_working_set_bytes", "pod", "probed"},
	} {
		found := false
		for _, s := range all[c.family].GetMetric() {
			for _, l := range s.GetLabel() {
				found = found || (l.GetName() == c.label && l.GetValue() == c.value)
			}
		}
		if !found {
			t.Errorf("%s has no series with %s=%s", c.family, c.label, c.value)
		}
	}

	// cAdvisor's container families on /metrics/cadvisor, which
	// kube-prometheus-stack's k8s.rules read (container CPU and memory
	// per pod), with the probed pod's container among them.
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		body, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + node + "/proxy/metrics/cadvisor").DoRaw(ctx)
		if err != nil {
			t.Logf("GET /metrics/cadvisor through nodes/proxy: %v", err)
			return false, nil
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			return false, err
		}
		missing = nil
		for _, family := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_rss"} {
			found := false
			for _, s := range mfs[family].GetMetric() {
				pod, container := "", ""
				for _, l := range s.GetLabel() {
					switch l.GetName() {
					case "pod":
						pod = l.GetValue()
					case "container":
						container = l.GetValue()
					}
				}
				found = found || (pod == "probed" && container == "c")
			}
			if !found {
				missing = append(missing, family)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Errorf("/metrics/cadvisor has no series of the probed pod's container in %v: %v", missing, err)
	}
}
