package reset

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process of the host, as /proc shows it.
type proc struct {
	pid  int
	argv []string
	// cwd is its working directory ("" when unreadable).
	cwd string
}

// name is argv[0]'s base name.
func (p proc) name() string {
	if len(p.argv) == 0 {
		return ""
	}
	return filepath.Base(p.argv[0])
}

// processes lists the host's processes but this one. A process that ends
// while it is read is left out.
func processes() ([]proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue // gone, or a kernel thread
		}
		p := proc{pid: pid, argv: strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")}
		p.cwd, _ = os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		out = append(out, p)
	}
	return out, nil
}

// flagValue is the value of a flag given as "-NAME V", "--NAME V",
// "-NAME=V" or "--NAME=V" in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			return "", false
		}
		f := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if f == a {
			continue
		}
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v, true
		}
		if f == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// boolFlag reports whether the boolean flag NAME is set in args
// ("--NAME", "--NAME=true").
func boolFlag(args []string, name string) bool {
	set := false
	for _, a := range args {
		if a == "--" {
			break
		}
		f := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if f == a {
			continue
		}
		if f == name {
			set = true
		} else if v, ok := strings.CutPrefix(f, name+"="); ok {
			set, _ = strconv.ParseBool(v)
		}
	}
	return set
}

// alive reports whether pid is a process that has not ended. A process
// has ended once every thread of it has: a killed multi-threaded process
// (a Go shim) shows its first thread as a zombie while the others are
// still exiting, and those still hold its open files (a shim's listening
// socket answers until the last one is gone).
func alive(pid int) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return running(filepath.Join(dir, "stat"))
	}
	for _, t := range tasks {
		if running(filepath.Join(dir, "task", t.Name(), "stat")) {
			return true
		}
	}
	return false
}

// running reports whether the process or thread whose stat file is path
// is there and not a zombie.
func running(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// errStillAlive is what kill returns for processes that outlived SIGKILL.
var errStillAlive = errors.New("still running after SIGKILL")

// kill sends sig to pids and waits until they have ended, sending
// SIGKILL to what is left after grace.
func kill(ctx context.Context, pids []int, sig syscall.Signal, grace time.Duration) error {
	signal(pids, sig)
	if sig != syscall.SIGKILL && waitGone(ctx, pids, grace) {
		return nil
	}
	signal(pids, syscall.SIGKILL)
	if !waitGone(ctx, pids, 10*time.Second) {
		return errStillAlive
	}
	return nil
}

func signal(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// waitGone waits up to d for every one of pids to end.
func waitGone(ctx context.Context, pids []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		left := false
		for _, pid := range pids {
			left = left || alive(pid)
		}
		if !left {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
