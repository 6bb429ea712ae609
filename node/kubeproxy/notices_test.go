package kubeproxy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/proxy"
	proxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
)

// TestNotices_AreTheNodeManagers: kube-proxy's own node manager, as
// linked, logs each of Notices and ends its process with status 1 when
// the node's pod CIDRs or addresses change or its Node is deleted.
func TestNotices_AreTheNodeManagers(t *testing.T) {
	for i, change := range []string{"podCIDRs", "addresses", "deleted"} {
		t.Run(change, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNodeManager$")
			cmd.Env = append(os.Environ(), "KUBEPROXY_TEST_NODE_CHANGE="+change)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("the node manager's process ended with %v, want exit status 1\n%s", err, out)
			}
			if !bytes.Contains(out, []byte(strconv.Quote(Notices[i]))) {
				t.Errorf("the node manager did not log %q:\n%s", Notices[i], out)
			}
		})
	}
}

// TestHelperNodeManager runs kube-proxy's node manager over a fake API
// and tells it of the change KUBEPROXY_TEST_NODE_CHANGE names, for
// TestNotices_AreTheNodeManagers.
func TestHelperNodeManager(t *testing.T) {
	change := os.Getenv("KUBEPROXY_TEST_NODE_CHANGE")
	if change == "" {
		t.Skip("the process TestNotices_AreTheNodeManagers runs")
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       corev1.NodeSpec{PodCIDR: "10.42.0.0/24", PodCIDRs: []string{"10.42.0.0/24"}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.5"}}},
	}
	cfg := &proxyconfig.KubeProxyConfiguration{DetectLocalMode: proxyconfig.LocalModeNodeCIDR}
	m, err := proxy.NewNodeManager(context.Background(), fake.NewClientset(node), "n1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	changed := node.DeepCopy()
	switch change {
	case "podCIDRs":
		changed.Spec.PodCIDR, changed.Spec.PodCIDRs = "10.42.1.0/24", []string{"10.42.1.0/24"}
		m.OnNodeChange(changed)
	case "addresses":
		changed.Status.Addresses[0].Address = "192.168.1.6"
		m.OnNodeChange(changed)
	case "deleted":
		m.OnNodeDelete(node)
	}
	t.Fatalf("the node manager went on after the change %q", change)
}
