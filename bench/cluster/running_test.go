package cluster

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestStarted: a process started now is reported as started now, within
// /proc's 10 ms ticks and the test's own scheduling.
func TestStarted(t *testing.T) {
	before := time.Now()
	c := exec.Command("sleep", "5")
	if err := c.Start(); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	got, err := Started(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Sub(before); d < -50*time.Millisecond || d > time.Second {
		t.Errorf("started %v after the test's clock read, want within [-50ms, 1s]", d)
	}
	if _, err := Started(os.Getpid()); err != nil {
		t.Errorf("this process: %v", err)
	}
}
