package childproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/internal/testlog"
)

// gone reports whether pid has exited (a zombie nobody reaped counts).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// waitGone waits for pid to exit, failing the test after d.
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
	for !gone(pid) {
		select {
		case <-tick.C:
		case <-deadline:
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d is still there after %v", pid, d)
		}
	}
}

func pidOf(t *testing.T, m map[string]any) int {
	t.Helper()
	pid, ok := m["pid"].(float64)
	if !ok || pid <= 0 {
		t.Fatalf("no pid in %v", m)
	}
	return int(pid)
}

// supervise runs Supervise in a goroutine; the returned func cancels it
// and waits for it to return.
func supervise(t *testing.T, o Options) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Supervise(ctx, o) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Supervise did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestSupervise_StartsTheChildAgain: a child that ends as klog.Fatal
// ends a process (status 255, a line that is not JSON) is started again;
// when the context ends the running one is stopped and Supervise returns.
func TestSupervise_StartsTheChildAgain(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
echo "{\"level\":\"warn\",\"time\":\"2020-01-01T00:00:00Z\",\"message\":\"run $n\",\"args\":\"$*\"}" >&2
if [ $n -eq 1 ]; then echo "F1126 failed to initialize CSINode"; exit 255; fi
exec sleep 600`, runs)
	log := testlog.New(100)
	stop := supervise(t, Options{Name: "stand-in", Argv: []string{"sh", "-c", script, "sh", "--flag"}, Log: zerolog.New(log), FirstDelay: time.Millisecond})

	first := log.Next(t, "stand-in started")
	m := log.Next(t, "run 1")
	if m["level"] != "warn" || m["process"] != "stand-in" || m["time"] != nil || m["args"] != "--flag" {
		t.Errorf("the child's line came out as %v: want its level and fields, process=stand-in and no time of its own", m)
	}
	if m := log.Next(t, "CSINode"); m["level"] != "error" {
		t.Errorf("a line that is not JSON came out as %v, want an error", m)
	}
	if m := log.Next(t, "stand-in exited; starting it again"); m["error"] != "exit status 255" || m["level"] != "error" {
		t.Errorf("the exit was logged as %v", m)
	}
	waitGone(t, pidOf(t, first), 10*time.Second)
	second := pidOf(t, log.Next(t, "stand-in started"))
	log.Next(t, "run 2")

	stop()
	if !gone(second) {
		t.Errorf("the child (pid %d) is still there after Supervise returned", second)
	}
}

// TestSupervise_NoticedExits: an exit after one of Notices is logged at
// info level with the notice as its reason; the next run's exit without
// one is an error again.
func TestSupervise_NoticedExits(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
case $n in
1) echo '{"level":"info","message":"Node changed","node":"n1"}' >&2; echo '{"level":"debug","message":"flushed"}' >&2; exit 1;;
2) echo '{"level":"info","message":"Node changed, or not"}' >&2; exit 1;;
esac
exec sleep 600`, runs)
	log := testlog.New(100)
	supervise(t, Options{Name: "stand-in", Argv: []string{"sh", "-c", script}, Log: zerolog.New(log), FirstDelay: time.Millisecond, Notices: []string{"Node changed"}})

	if m := log.Next(t, "stand-in exited; starting it again"); m["level"] != "info" || m["reason"] != "Node changed" || m["error"] != "exit status 1" {
		t.Errorf("the exit after a notice was logged as %v, want info with the reason", m)
	}
	if m := log.Next(t, "stand-in exited; starting it again"); m["level"] != "error" || m["reason"] != nil {
		t.Errorf("the exit after no notice was logged as %v, want an error", m)
	}
}

// TestSupervise_KillsAChildThatIgnoresSIGTERM after StopTimeout.
func TestSupervise_KillsAChildThatIgnoresSIGTERM(t *testing.T) {
	log := testlog.New(100)
	// An ignored signal stays ignored across exec.
	stop := supervise(t, Options{Name: "stubborn", Argv: []string{"sh", "-c", "trap '' TERM; echo ready; exec sleep 600"}, Log: zerolog.New(log), StopTimeout: 100 * time.Millisecond})
	pid := pidOf(t, log.Next(t, "stubborn started"))
	log.Next(t, "ready")
	stop()
	if !gone(pid) {
		t.Errorf("the child (pid %d) is still there after Supervise returned", pid)
	}
}

// TestSupervise_ChildDiesWithItsParent: a supervisor killed with SIGKILL
// takes its child with it.
func TestSupervise_ChildDiesWithItsParent(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSupervisor$")
	cmd.Env = append(os.Environ(), "CHILDPROC_TEST_SUPERVISOR=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := 0
	sc := bufio.NewScanner(stderr)
	for pid == 0 && sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == "sleeper started" {
			pid = pidOf(t, m)
		}
	}
	if pid == 0 {
		t.Fatalf("the supervisor never started its child: %v", sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pid, 10*time.Second)
}

// TestHelperSupervisor is the supervisor TestSupervise_ChildDiesWithItsParent
// kills, when run with CHILDPROC_TEST_SUPERVISOR=1.
func TestHelperSupervisor(t *testing.T) {
	if os.Getenv("CHILDPROC_TEST_SUPERVISOR") != "1" {
		t.Skip("the supervisor process of TestSupervise_ChildDiesWithItsParent")
	}
	Supervise(context.Background(), Options{Name: "sleeper", Argv: []string{"sleep", "600"}, Log: zerolog.New(os.Stderr)})
}

func TestLineLog(t *testing.T) {
	log := testlog.New(10)
	c := &lineLog{log: zerolog.New(log)}
	// A line may come in pieces, and the last may lack its newline.
	for _, p := range []string{`{"level":"debug","message":"a",`, `"node":"n1"}` + "\n" + "goroutine 1 [running]:\n", `{"level":"info","message":"b"}`} {
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	c.flush()
	log.Close()
	var got []string
	for _, m := range log.All() {
		got = append(got, fmt.Sprintf("%v %v %v", m["level"], m["message"], m["node"]))
	}
	want := []string{"debug a n1", "error goroutine 1 [running]: <nil>", "info b <nil>"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}
