package podnet

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
