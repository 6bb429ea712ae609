package main

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestKubeProxyCommand: the command line the node agent starts kube-proxy
// with reaches kube-proxy's own flags (here one it refuses) through the
// hidden `sqlkube kube-proxy`, after the log flags.
func TestKubeProxyCommand(t *testing.T) {
	argv := kubeProxyCommand(zerolog.Nop().Level(zerolog.WarnLevel))
	if argv[0] != "/proc/self/exe" || !strings.Contains(strings.Join(argv, " "), "--log-format=json --log-level=warn kube-proxy --") {
		t.Fatalf("kube-proxy runs as %q", argv)
	}
	root := newRootCommand()
	root.SetArgs(append(argv[1:], "--no-such-flag"))
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --no-such-flag") {
		t.Errorf("sqlkube kube-proxy -- --no-such-flag: %v, want kube-proxy's unknown flag", err)
	}
}
