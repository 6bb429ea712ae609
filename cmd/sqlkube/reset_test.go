package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sqlkube/sqlkube/node/reset"
)

func TestReset_Flags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reset"}, `required flag(s) "data-dir" not set`},
		{[]string{"reset", "--data-dir", filepath.Join(t.TempDir(), "missing")}, "no such file"},
	} {
		root := newRootCommand()
		root.SetArgs(tc.args)
		root.SetOut(&bytes.Buffer{})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) && !(os.Geteuid() != 0 && strings.Contains(err.Error(), "needs root")) {
			t.Errorf("sqlkube %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestReset_RefusesWhileRunning: a process that names the data directory
// with --data-dir (here a shell, as a server would) holds it: reset
// refuses in one line before it removes anything, and prints nothing.
func TestReset_RefusesWhileRunning(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: reset needs root")
	}
	dir := t.TempDir()
	// The shell's own argv names the directory (it does not exec sleep:
	// a command follows).
	holder := exec.Command("sh", "-c", "sleep 600; :", "sqlkube", "--data-dir", dir)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })

	var out bytes.Buffer
	root := newRootCommand()
	root.SetArgs([]string{"reset", "--data-dir", dir, "--purge"})
	root.SetOut(&out)
	err := root.Execute()
	if !errors.Is(err, reset.ErrRunning) || !strings.Contains(err.Error(), "sh (pid "+strconv.Itoa(holder.Process.Pid)+")") || strings.Contains(err.Error(), "\n") {
		t.Errorf("reset while a process holds the directory: %v, want one line naming the holder", err)
	}
	if out.Len() > 0 {
		t.Errorf("reset printed %q while refusing", out.String())
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the data directory: %v", err)
	}
}
