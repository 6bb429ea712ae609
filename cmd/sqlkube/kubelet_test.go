package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/node/kubelet"
)

// TestKubeletCommand: the command line the node agent starts the kubelet
// with reaches the hidden `sqlkube kubelet` after the log flags, which
// reads its options from the file kubelet.Run appends (here ones the
// kubelet refuses).
func TestKubeletCommand(t *testing.T) {
	argv := kubeletCommand(zerolog.Nop().Level(zerolog.WarnLevel))
	if argv[0] != "/proc/self/exe" || strings.Join(argv[1:], " ") != "--log-format=json --log-level=warn kubelet" {
		t.Fatalf("the kubelet runs as %q", argv)
	}
	file := filepath.Join(t.TempDir(), "kubelet.json")
	if err := kubelet.WriteOptions(file, kubelet.Options{Dir: t.TempDir(), Kubeconfig: "kc"}); err != nil {
		t.Fatal(err)
	}
	root := newRootCommand()
	root.SetArgs(append(argv[1:], file))
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "RuntimeEndpoint are required") {
		t.Errorf("sqlkube kubelet FILE without a runtime: %v, want the kubelet's options refused", err)
	}
	root = newRootCommand()
	root.SetArgs(append(argv[1:], filepath.Join(t.TempDir(), "missing.json")))
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("sqlkube kubelet MISSING: %v", err)
	}
}
