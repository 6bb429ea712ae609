package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"

	"github.com/sqlkube/sqlkube/internal/testlog"
	"github.com/sqlkube/sqlkube/internal/testport"
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
	if c.CgroupDriver != "cgroupfs" || !c.CgroupsPerQOS || c.CgroupRoot != CgroupRoot(dir) || len(c.EnforceNodeAllocatable) != 0 || c.FailSwapOn {
		t.Errorf("cgroups: %s %v %s %v %v", c.CgroupDriver, c.CgroupsPerQOS, c.CgroupRoot, c.EnforceNodeAllocatable, c.FailSwapOn)
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

// TestCgroupRoot: a node's cgroup root is its own, the same however its
// directory is named, and under /sqlkube.
func TestCgroupRoot(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	got := CgroupRoot(a)
	if !strings.HasPrefix(got, "/sqlkube/") || strings.Count(got, "/") != 2 {
		t.Errorf("CgroupRoot(%s) = %q, want /sqlkube/NAME", a, got)
	}
	if other := CgroupRoot(b); other == got {
		t.Errorf("two nodes' directories share the cgroup root %s", got)
	}
	if via := CgroupRoot(link); via != got {
		t.Errorf("through a symbolic link the cgroup root is %s, want %s", via, got)
	}
	t.Chdir(filepath.Dir(a))
	if r := CgroupRoot(filepath.Base(a)); r != got {
		t.Errorf("from a relative path the cgroup root is %s, want %s", r, got)
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

// TestServer_LeavesThisProcessFeatureGates: the kubelet's --feature-gates
// are checked, never set in the node agent (which may be the API server).
func TestServer_LeavesThisProcessFeatureGates(t *testing.T) {
	dir := t.TempDir()
	before := utilfeature.DefaultFeatureGate.Enabled(features.KubeletSeparateDiskGC)
	o := Options{Dir: dir, Kubeconfig: "kc", RuntimeEndpoint: "unix:///c.sock", ExtraArgs: []string{fmt.Sprintf("--feature-gates=KubeletSeparateDiskGC=%t", !before)}}
	s, err := Server(o)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.FeatureGates["KubeletSeparateDiskGC"]; got == before {
		t.Errorf("the kubelet's configuration has KubeletSeparateDiskGC=%t, want %t", got, !before)
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.KubeletSeparateDiskGC) != before {
		t.Errorf("Server changed this process's KubeletSeparateDiskGC gate")
	}
	o.ExtraArgs = []string{"--feature-gates=NoSuchGate=true"}
	if _, err := Server(o); err == nil || !strings.Contains(err.Error(), "NoSuchGate") {
		t.Errorf("an unknown gate: %v", err)
	}
}

func TestWriteOptions_RoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.json")
	o := Options{
		Dir: "/d", NodeName: "n1", NodeIP: "10.0.0.5", Kubeconfig: "/k", BootstrapKubeconfig: "/b", ServerTLSBootstrap: true,
		ClientCAFile: "/ca", TLSCertFile: "/c", TLSKeyFile: "/k", RuntimeEndpoint: "unix:///c.sock", Port: 1,
		PodCIDR: "10.42.0.0/24", ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local",
		NodeLabels: map[string]string{"a": "b"}, ExtraArgs: []string{"--max-pods=5"},
		Command: []string{"x"}, Log: zerolog.Nop(),
	}
	if err := WriteOptions(path, o); err != nil {
		t.Fatal(err)
	}
	got, err := ReadOptions(path)
	if err != nil {
		t.Fatal(err)
	}
	o.Command, o.Log = nil, zerolog.Logger{}
	if !reflect.DeepEqual(got, o) {
		t.Errorf("read back %+v, want %+v", got, o)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the options file: %v %v, want mode 0600", st, err)
	}
}

// freePort is a port nothing listens on now.
func freePort(t *testing.T) int { return testport.Free(t) }

// TestRun_StartsTheKubeletAgain: the kubelet's child gets its Options
// from the file Run names; when it ends as the kubelet ends its process
// (os.Exit(1)), it is started again; when the context ends, the running
// one is stopped and Run returns with no process left.
func TestRun_StartsTheKubeletAgain(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	// A stand-in for `sqlkube kubelet FILE`: it logs the file it was
	// given; its first run dies as the kubelet does when its container
	// manager cannot start; its second runs until it is stopped.
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
echo "{\"level\":\"info\",\"message\":\"run $n\",\"file\":\"$1\"}" >&2
if [ $n -eq 1 ]; then echo "E1126 Failed to start ContainerManager"; exit 1; fi
exec sleep 600`, runs)
	log := testlog.New(100)
	o := Options{
		Dir: dir, NodeName: "n1", Kubeconfig: "/n/kubelet.kubeconfig", RuntimeEndpoint: "unix:///c.sock",
		Port: freePort(t), ExtraArgs: []string{"--max-pods=7"},
		Command: []string{"sh", "-c", script, "sh"}, Log: zerolog.New(log),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	first := log.Next(t, "kubelet started")
	m := log.Next(t, "run 1")
	if m["process"] != "kubelet" || m["file"] != OptionsFile(dir) {
		t.Errorf("the child's line came out as %v: want process=kubelet and the options file %s", m, OptionsFile(dir))
	}
	got, err := ReadOptions(OptionsFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeName != "n1" || got.Port != o.Port || len(got.ExtraArgs) != 1 || got.ExtraArgs[0] != "--max-pods=7" {
		t.Errorf("the child reads %+v", got)
	}
	if m := log.Next(t, "kubelet exited; starting it again"); m["error"] != "exit status 1" {
		t.Errorf("the exit came out as %v", m)
	}
	started := log.Next(t, "kubelet started")
	if started["pid"] == first["pid"] {
		t.Errorf("the second start has the first one's pid %v", first["pid"])
	}
	log.Next(t, "run 2")

	testlog.Stopped(t, cancel, done, started)
}

func TestRun_RefusesBadOptions(t *testing.T) {
	wait := portWait
	portWait = 200 * time.Millisecond
	t.Cleanup(func() { portWait = wait })
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	base := Options{Dir: dir, Kubeconfig: "kc", RuntimeEndpoint: "unix:///c.sock", Port: freePort(t), Command: []string{"false"}}
	for name, o := range map[string]Options{
		"no command":  func() Options { b := base; b.Command = nil; return b }(),
		"a bad flag":  func() Options { b := base; b.ExtraArgs = []string{"--no-such-flag"}; return b }(),
		"a port held": func() Options { b := base; b.Port = l.Addr().(*net.TCPAddr).Port; return b }(),
	} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := os.Stat(OptionsFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("options written for a refused start: %v", err)
	}
}

// TestServer_CgroupV1, on this host's cgroup version: on a cgroup v1
// host the kubelet is let run (failCgroupV1 false), Run says so in one
// warning, and --fail-cgroupv1 brings back upstream's refusal; on a
// cgroup v2 host upstream's default stays and nothing is said.
func TestServer_CgroupV1(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, NodeName: "n1", Kubeconfig: "kc", RuntimeEndpoint: "unix:///c.sock"}
	v1 := !cgroupsV2()
	t.Logf("this host runs cgroup v1: %v", v1)
	s, err := Server(o)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.KubeletConfiguration.FailCgroupV1; got != !v1 {
		t.Errorf("failCgroupV1 = %v on a host with cgroup v1 %v", got, v1)
	}
	if v1 {
		strict := o
		strict.ExtraArgs = []string{"--fail-cgroupv1"}
		if _, err := Server(strict); err == nil || !strings.Contains(err.Error(), "cgroup v1") {
			t.Errorf("--fail-cgroupv1 on a cgroup v1 host: %v, want the kubelet's refusal", err)
		}
	}

	// Run, with a stand-in child: the warning comes before it starts.
	log := testlog.New(100)
	o.Command = []string{"sh", "-c", "exec sleep 600", "sh"}
	o.Port = freePort(t)
	o.Log = zerolog.New(log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	started := log.Next(t, "kubelet started")
	testlog.Stopped(t, cancel, done, started)
	log.Close()
	warns := 0
	for _, m := range log.All() {
		if m["level"] == "warn" && strings.Contains(fmt.Sprint(m["message"]), "cgroup v1") {
			warns++
		}
	}
	if want := map[bool]int{true: 1, false: 0}[v1]; warns != want {
		t.Errorf("%d warnings about cgroup v1, want %d", warns, want)
	}
}

// TestServer_FlagNoticesAreWarnings: a deprecated kubelet flag's notice,
// which the kubelet prints as text, comes out of the child as one
// warning (the supervisor logs text lines as errors).
func TestServer_FlagNoticesAreWarnings(t *testing.T) {
	log := testlog.New(10)
	o := Options{Dir: t.TempDir(), Kubeconfig: "kc", RuntimeEndpoint: "unix:///c.sock", ExtraArgs: []string{"--port=10999"}}
	if _, err := server(o, warnLines{zerolog.New(log)}); err != nil {
		t.Fatal(err)
	}
	log.Close()
	all := log.All()
	if len(all) != 1 || all[0]["level"] != "warn" || !strings.Contains(fmt.Sprint(all[0]["message"]), "Flag --port has been deprecated") {
		t.Errorf("the flag's notice came out as %v; want one warning", all)
	}
}
