package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestWriteCNIConfig(t *testing.T) {
	dir := t.TempDir()
	if err := WriteCNIConfig(dir, "/var/lib/ipam", "10.42.3.0/24"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
			IPAM   struct {
				DataDir string                `json:"dataDir"`
				Ranges  [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins %+v", conf.Plugins)
	}
	br := conf.Plugins[0]
	if br.Bridge != BridgeName("10.42.3.0/24") || br.IPAM.DataDir != "/var/lib/ipam" || br.IPAM.Ranges[0][0]["subnet"] != "10.42.3.0/24" {
		t.Errorf("bridge plugin %+v", br)
	}
	// The same configuration again leaves the file alone; nothing else is
	// left in the directory the runtime watches.
	st, _ := os.Stat(filepath.Join(dir, ConfigFile))
	if err := WriteCNIConfig(dir, "/var/lib/ipam", "10.42.3.0/24"); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(filepath.Join(dir, ConfigFile))
	if !st2.ModTime().Equal(st.ModTime()) {
		t.Error("an unchanged configuration was written again")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d files, want 1", len(ents))
	}
	if err := WriteCNIConfig(dir, "/x", "10.42.3.0"); err == nil {
		t.Error("a pod CIDR without a prefix length was accepted")
	}
}

func TestNames(t *testing.T) {
	a, b := BridgeName("10.42.0.0/24"), BridgeName("10.42.1.0/24")
	if a == b {
		t.Errorf("two pod CIDRs share bridge %s", a)
	}
	if len(a) > 15 {
		t.Errorf("bridge name %q is longer than an interface name may be", a)
	}
	if c := MasqueradeChain("10.42.0.0/24"); len(c) > 28 || c == MasqueradeChain("10.42.1.0/24") {
		t.Errorf("masquerade chain %q: too long for iptables or not unique", c)
	}
}

func TestInternalIP(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "h"},
		{Type: corev1.NodeInternalIP, Address: "fd00::1"},
		{Type: corev1.NodeInternalIP, Address: "192.168.5.7"},
	}}}
	if got := internalIP(n); got.String() != "192.168.5.7" {
		t.Errorf("internalIP = %v, want the IPv4 InternalIP", got)
	}
	if got := internalIP(&corev1.Node{}); got != nil {
		t.Errorf("internalIP of a node without addresses = %v", got)
	}
}

func TestConfiguredPodCIDR(t *testing.T) {
	dir := t.TempDir()
	if _, err := ConfiguredPodCIDR(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no configuration: %v, want fs.ErrNotExist", err)
	}
	if err := WriteCNIConfig(dir, "/var/lib/ipam", "10.42.3.0/24"); err != nil {
		t.Fatal(err)
	}
	if got, err := ConfiguredPodCIDR(dir); err != nil || got != "10.42.3.0/24" {
		t.Errorf("ConfiguredPodCIDR = %q, %v; want 10.42.3.0/24", got, err)
	}
}

// TestRun_ReturnsOnABadPodCIDR: Run ends with an error, before it changes
// anything on the host, when the node's pod CIDR is not one; its
// informers stop with it.
func TestRun_ReturnsOnABadPodCIDR(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDR: "10.42.0.0"}})
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), client, Options{NodeName: "n1", CNIConfDir: filepath.Join(dir, "net.d"), IPAMDir: filepath.Join(dir, "ipam"), Log: zerolog.Nop()})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "pod CIDR") {
			t.Errorf("Run = %v, want an error about the pod CIDR", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	if _, err := os.Stat(filepath.Join(dir, "net.d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a CNI configuration directory was made: %v", err)
	}
}
