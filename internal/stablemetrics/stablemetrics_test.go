package stablemetrics

import (
	"slices"
	"testing"
)

// TestList reads each component's declarations from the module cache and
// checks a few that Kubernetes' stable-metrics list gives, with their
// types, labels and buckets, and that no declaration is listed twice.
func TestList(t *testing.T) {
	for _, c := range []struct {
		name     string
		packages []string
		want     []Metric
	}{
		{"apiserver", APIServer, []Metric{
			{Name: "apiserver_request_total", Type: "Counter", Level: "STABLE",
				Labels: []string{"code", "component", "dry_run", "group", "resource", "scope", "subresource", "verb", "version"}},
		}},
		{"scheduler", Scheduler, []Metric{
			{Name: "scheduler_schedule_attempts_total", Type: "Counter", Level: "STABLE", Labels: []string{"profile", "result"}},
			{Name: "scheduler_pending_pods", Type: "Gauge", Level: "STABLE", Labels: []string{"queue"}},
		}},
		{"controller-manager", ControllerManager, []Metric{
			{Name: "job_controller_job_syncs_total", Type: "Counter", Level: "STABLE", Labels: []string{"action", "completion_mode", "result"}},
			{Name: "node_collector_evictions_total", Type: "Counter", Level: "STABLE", Labels: []string{"zone"}},
			{Name: "workqueue_depth", Type: "Gauge", Level: "BETA", Labels: []string{"name"}},
		}},
		{"kubelet", Kubelet, []Metric{
			{Name: "prober_probe_total", Type: "Counter", Level: "BETA", Labels: []string{"container", "namespace", "pod", "pod_uid", "probe_type", "result"}},
			{Name: "node_cpu_usage_seconds_total", Type: "Custom", Level: "STABLE", Labels: []string{}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			list, source, ok := List(t, c.packages)
			if !ok {
				t.Skip("the module cache does not hold go.mod's Kubernetes")
			}
			t.Logf("%d metrics from %s", len(list), source)
			seen := map[string]bool{}
			for _, m := range list {
				if seen[m.Name] {
					t.Errorf("%s is listed twice", m.Name)
				}
				seen[m.Name] = true
			}
			for _, w := range c.want {
				i := slices.IndexFunc(list, func(m Metric) bool { return m.Name == w.Name })
				if i < 0 {
					t.Errorf("%s is not listed", w.Name)
					continue
				}
				got := list[i]
				if got.Type != w.Type || got.Level != w.Level || !slices.Equal(slices.Sorted(slices.Values(got.Labels)), w.Labels) {
					t.Errorf("%s: %s %s %v, want %s %s %v", w.Name, got.Level, got.Type, got.Labels, w.Level, w.Type, w.Labels)
				}
			}
			for _, m := range list {
				t.Logf("%s %s %s %v", m.Level, m.Type, m.Name, m.Labels)
			}
		})
	}
}
