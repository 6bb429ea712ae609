package kubeproxy

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/internal/testlog"
)

func TestRun_StartsTheChildAgain(t *testing.T) {
	// A stand-in for `sqlkube kube-proxy`: its first run logs and dies as
	// kube-proxy does when the node's pod CIDR changes (and writes a line
	// that is not JSON); its second logs and runs until it is stopped.
	runs := filepath.Join(t.TempDir(), "runs")
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
echo "{\"level\":\"warn\",\"time\":\"2020-01-01T00:00:00Z\",\"message\":\"run $n\",\"args\":\"$*\"}" >&2
if [ $n -eq 1 ]; then echo "not JSON"; echo '{"level":"info","message":"PodCIDRs changed for the node"}' >&2; exit 1; fi
exec sleep 600`, runs)
	log := testlog.New(100)
	o := Options{Kubeconfig: "/n/kubelet.kubeconfig", NodeName: "n1", Command: []string{"sh", "-c", script, "sh"}, Log: zerolog.New(log)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	log.Next(t, "kube-proxy started") // the first
	m := log.Next(t, "run 1")
	if m["level"] != "warn" || m["process"] != "kube-proxy" || m["time"] != nil {
		t.Errorf("the child's line came out as %v: want its level, process=kube-proxy and no time of its own", m)
	}
	if args, _ := m["args"].(string); !strings.Contains(args, "--hostname-override=n1") {
		t.Errorf("the child got %q, want kube-proxy's flags", args)
	}
	if m := log.Next(t, "not JSON"); m["level"] != "error" {
		t.Errorf("a line that is not JSON came out as %v, want an error", m)
	}
	log.Next(t, "PodCIDRs changed")
	// An exit kube-proxy announces is no error.
	if m := log.Next(t, "starting it again"); m["level"] != "info" || m["reason"] != "PodCIDRs changed for the node" {
		t.Errorf("the restart was logged as %v, want info with kube-proxy's reason", m)
	}
	started := log.Next(t, "kube-proxy started")
	log.Next(t, "run 2")

	testlog.Stopped(t, cancel, done, started)
}

func TestRun_RefusesBadOptions(t *testing.T) {
	ctx := context.Background()
	if err := Run(ctx, Options{Kubeconfig: "k", NodeName: "n1"}); err == nil {
		t.Error("no Command: accepted")
	}
	if err := Run(ctx, Options{Kubeconfig: "k", NodeName: "n1", Command: []string{"true"}, ExtraArgs: []string{"--no-such-flag"}}); err == nil {
		t.Error("a bad flag: accepted")
	}
}
