package kubelet

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestServer_Configuration(t *testing.T) {
	dir := t.TempDir()
	s, err := Server(Options{
		Dir: dir, NodeName: "n1", NodeIP: "10.0.0.5", Kubeconfig: filepath.Join(dir, "kc"),
		ClientCAFile: "/ca.crt", TLSCertFile: "/s.crt", TLSKeyFile: "/s.key",
		RuntimeEndpoint: "unix:///run/c.sock", Port: 12345, PodCIDR: "10.42.3.0/24",
		ExtraArgs: []string{"--max-pods=42", "--node-labels=role=edge"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := s.KubeletConfiguration
	if c.Port != 12345 || c.ReadOnlyPort != 0 || c.HealthzPort != 0 || c.ContainerRuntimeEndpoint != "unix:///run/c.sock" {
		t.Errorf("ports/endpoint: %d %d %d %s", c.Port, c.ReadOnlyPort, c.HealthzPort, c.ContainerRuntimeEndpoint)
	}
	if c.CgroupDriver != "cgroupfs" || c.CgroupsPerQOS || len(c.EnforceNodeAllocatable) != 0 || c.FailSwapOn {
		t.Errorf("cgroups: %s %v %v %v", c.CgroupDriver, c.CgroupsPerQOS, c.EnforceNodeAllocatable, c.FailSwapOn)
	}
	if c.Authentication.Anonymous.Enabled || !c.Authentication.Webhook.Enabled || c.Authentication.X509.ClientCAFile != "/ca.crt" || c.Authorization.Mode != "Webhook" {
		t.Errorf("authn/authz: %+v %+v", c.Authentication, c.Authorization)
	}
	if c.MaxPods != 42 {
		t.Errorf("--kubelet-arg=--max-pods=42 gave maxPods %d", c.MaxPods)
	}
	if s.NodeLabels["role"] != "edge" || s.HostnameOverride != "n1" || s.NodeIP != "10.0.0.5" {
		t.Errorf("flags: labels %v name %q ip %q", s.NodeLabels, s.HostnameOverride, s.NodeIP)
	}
	if !strings.HasPrefix(s.RootDirectory, dir) || !strings.HasPrefix(c.PodLogsDir, dir) || !strings.HasPrefix(c.StaticPodPath, dir) {
		t.Errorf("directories outside the node's: %s %s %s", s.RootDirectory, c.PodLogsDir, c.StaticPodPath)
	}
}

func TestServer_RejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	base := Options{Dir: dir, Kubeconfig: "kc", RuntimeEndpoint: "unix:///c.sock"}
	for name, o := range map[string]Options{
		"no runtime":   {Dir: dir, Kubeconfig: "kc"},
		"unknown flag": func() Options { b := base; b.ExtraArgs = []string{"--no-such-flag"}; return b }(),
		"argument":     func() Options { b := base; b.ExtraArgs = []string{"stray"}; return b }(),
		"invalid":      func() Options { b := base; b.ExtraArgs = []string{"--max-pods=-1"}; return b }(),
	} {
		if _, err := Server(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPortFree: a port another program listens on is refused before the
// kubelet starts (it would end the process).
func TestPortFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(l.Addr().(*net.TCPAddr).Port)
	if err := portFree("127.0.0.1", port); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("a port in use: %v", err)
	}
	l.Close()
	if err := portFree("127.0.0.1", port); err != nil {
		t.Errorf("a free port: %v", err)
	}
}
