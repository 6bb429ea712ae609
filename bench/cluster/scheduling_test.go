package cluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/sqlkube/sqlkube/scheduler"
)

// TestNoDefaultSpreadConfig: the configuration the --no-default-spread
// variant hands the schedulers loads as Kubernetes' scheduler loads it,
// with its client settings, and PodTopologySpread without system default
// constraints.
func TestNoDefaultSpreadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(noDefaultSpreadConfig("/some/kubeconfig", true, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	o := scheduler.NewOptions()
	if err := o.Parse([]string{"--config", path, "--leader-elect=false"}); err != nil {
		t.Fatal(err)
	}
	cc, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c := cc.ClientConnection; c.Kubeconfig != "/some/kubeconfig" || c.QPS != raisedQPS || c.Burst != raisedBurst {
		t.Errorf("client connection %+v", c)
	}
	if cc.LeaderElection.LeaderElect {
		t.Error("leader election is on")
	}
	if len(cc.Profiles) != 1 {
		t.Fatalf("%d profiles", len(cc.Profiles))
	}
	var found bool
	for _, pc := range cc.Profiles[0].PluginConfig {
		args, ok := pc.Args.(*schedconfig.PodTopologySpreadArgs)
		if pc.Name != "PodTopologySpread" || !ok {
			continue
		}
		found = true
		if args.DefaultingType != schedconfig.ListDefaulting || len(args.DefaultConstraints) != 0 {
			t.Errorf("PodTopologySpread args %+v", args)
		}
	}
	if !found {
		t.Error("no PodTopologySpread args in the profile")
	}
}

// TestNoDefaultSpreadConfig_Gated: the sqlkube-server variant's
// configuration leaves the kubeconfig to the server and elects through a
// Lease in the gate's namespace.
func TestNoDefaultSpreadConfig_Gated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(noDefaultSpreadConfig("", true, schedulerGate)), 0o600); err != nil {
		t.Fatal(err)
	}
	o := scheduler.NewOptions()
	if err := o.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	cc, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c := cc.ClientConnection; c.Kubeconfig != "" || c.QPS != raisedQPS || c.Burst != raisedBurst {
		t.Errorf("client connection %+v", c)
	}
	if le := cc.LeaderElection; !le.LeaderElect || le.ResourceNamespace != schedulerGate || le.ResourceName != "kube-scheduler" {
		t.Errorf("leader election %+v", le)
	}
}

// TestPlacementOf counts pods per node, empty nodes included, and per
// zone.
func TestPlacementOf(t *testing.T) {
	var objs []runtime.Object
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: node}}
	}
	// 20 nodes, 2 per zone: bench-0 gets 3 pods, bench-10 (zone-0 too)
	// 1, bench-1 1; one pod is unbound.
	objs = append(objs, pod("a", "bench-0"), pod("b", "bench-0"), pod("c", "bench-0"), pod("d", "bench-10"), pod("e", "bench-1"), pod("f", ""))
	cs := fake.NewClientset(objs...)
	p, err := PlacementOf(context.Background(), cs, "ns", 20)
	if err != nil {
		t.Fatal(err)
	}
	want := Placement{NodesUsed: 3, MinPerNode: 0, MaxPerNode: 3, MinPerZone: 0, MaxPerZone: 4}
	if p != want {
		t.Errorf("placement %+v, want %+v", p, want)
	}
}
