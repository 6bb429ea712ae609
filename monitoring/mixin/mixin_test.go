package mixin

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// prometheusVersion is the Prometheus that `make test-deps-prometheus`
// builds (PROMETHEUS_VERSION in the Makefile); its promtool checks the
// rules.
const prometheusVersion = "v0.316.0"

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval"`
		Rules    []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestRules_Groups reads Rules and checks that every rule is either a
// recording rule or an alert with an expression, that the recording
// groups NEEDS.md describes are there, and that the k8s.rules.* groups and
// the Down and InstanceUnreachable alerts are exactly the ones it
// describes: a refresh that changes them must revisit NEEDS.md.
func TestRules_Groups(t *testing.T) {
	var f ruleFile
	if err := yaml.Unmarshal(Rules, &f); err != nil {
		t.Fatalf("kubernetes-control-plane.rules.yaml: %v", err)
	}
	groups := map[string]int{} // name: recording rules
	var k8sRules, downAlerts []string
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: no name or no rules", g.Name)
		}
		if _, dup := groups[g.Name]; dup {
			t.Errorf("group %q: twice", g.Name)
		}
		groups[g.Name] = 0
		if strings.HasPrefix(g.Name, "k8s.rules.") {
			k8sRules = append(k8sRules, g.Name)
		}
		for i, r := range g.Rules {
			if (r.Record == "") == (r.Alert == "") || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %q, rule %d: want one of record and alert, and an expr; got record %q, alert %q, expr %q", g.Name, i, r.Record, r.Alert, r.Expr)
			}
			if r.Record != "" {
				groups[g.Name]++
			}
			if strings.HasSuffix(r.Alert, "Down") || strings.HasSuffix(r.Alert, "InstanceUnreachable") {
				downAlerts = append(downAlerts, r.Alert)
			}
		}
	}

	for _, name := range []string{
		"kube-apiserver-availability.rules",
		"kube-apiserver-burnrate.rules",
		"kube-apiserver-histogram.rules",
		"kube-scheduler.rules",
		"kubelet.rules",
		"node.rules",
	} {
		if n, ok := groups[name]; !ok || n == 0 {
			t.Errorf("group %s: missing or without recording rules (%d)", name, n)
		}
	}

	wantK8sRules := []string{
		"k8s.rules.container_cpu_usage_seconds_total",
		"k8s.rules.container_memory_working_set_bytes",
		"k8s.rules.container_memory_rss",
		"k8s.rules.container_memory_cache",
		"k8s.rules.container_memory_swap",
		"k8s.rules.container_memory_requests",
		"k8s.rules.container_cpu_requests",
		"k8s.rules.container_memory_limits",
		"k8s.rules.container_cpu_limits",
		"k8s.rules.pod_owner",
	}
	if !slices.Equal(k8sRules, wantK8sRules) {
		t.Errorf("k8s.rules.* groups:\n got %q\nwant %q", k8sRules, wantK8sRules)
	}
	wantDown := []string{
		"KubeAggregatedAPIDown", "KubeAPIDown", "KubeAPIInstanceUnreachable",
		"KubeletInstanceUnreachable", "KubeletDown",
		"KubeSchedulerDown", "KubeSchedulerInstanceUnreachable",
		"KubeControllerManagerDown", "KubeControllerManagerInstanceUnreachable",
	}
	if !slices.Equal(downAlerts, wantDown) {
		t.Errorf("Down and InstanceUnreachable alerts:\n got %q\nwant %q", downAlerts, wantDown)
	}
}

// TestRules_Promtool checks the file with promtool check rules, which
// parses every expression as Prometheus does when it loads the rules.
// Its lint is off: its one finding is kept upstream on purpose, the four
// rules recording code_verb:apiserver_request_total:increase1h, one per
// class of status code, whose series differ by the code label their
// expressions keep (the lint compares only the rules' static labels).
// promtool is looked for where `make test-deps-prometheus` builds it:
// SQLKUBE_PROMETHEUS_DIR, or GOPATH/bin/prometheus-VERSION by default.
// Without it the test is skipped, or fails under CI=true (make test
// builds it).
func TestRules_Promtool(t *testing.T) {
	dir := os.Getenv("SQLKUBE_PROMETHEUS_DIR")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err != nil {
			t.Fatalf("go env GOPATH: %v", err)
		}
		gopath := filepath.SplitList(strings.TrimSpace(string(out)))[0]
		dir = filepath.Join(gopath, "bin", "prometheus-"+prometheusVersion)
	}
	promtool := filepath.Join(dir, "promtool")
	if st, err := os.Stat(promtool); err != nil || st.Mode()&0o111 == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found at %s; CI must build it (make test-deps-prometheus)", promtool)
		}
		t.Skipf("skipping: promtool not found at %s (make test-deps-prometheus builds it)", promtool)
	}
	out, err := exec.Command(promtool, "check", "rules", "--lint=none", "kubernetes-control-plane.rules.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS:") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
