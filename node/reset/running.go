package reset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrRunning is what Run returns while a process runs on the data
// directory: a server or a node, which reset would pull the ground from
// under.
var ErrRunning = errors.New("reset: the data directory is in use")

// Holder is a process that runs on a data directory.
type Holder struct {
	PID int
	// Command names it: the program and its subcommand ("sqlkube server").
	Command string
}

func (h Holder) String() string { return fmt.Sprintf("%s (pid %d)", h.Command, h.PID) }

// FindHolder returns a process, other than this one, that runs with
// dataDir as its data directory, or nil. A process runs on a directory
// when its command line names it with --data-dir (relative to the
// process's working directory), or, for a command of defaults (sqlkube's
// subcommands, e.g. "server") given without --data-dir, when its default
// there is the directory. The two are the same directory when they are
// the same file, so symbolic links and bind mounts do not hide one.
// containerd and its shims are not holders: they are what reset stops.
func FindHolder(dataDir string, defaults map[string]string) (*Holder, error) {
	want, err := os.Stat(dataDir)
	if err != nil {
		return nil, err
	}
	procs, err := processes()
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if strings.HasPrefix(p.name(), "containerd") {
			continue
		}
		dir, sub := dataDirOf(p, defaults)
		if dir == "" {
			continue
		}
		if st, err := os.Stat(dir); err == nil && os.SameFile(st, want) {
			cmd := p.name()
			if sub != "" {
				cmd += " " + sub
			}
			return &Holder{PID: p.pid, Command: cmd}, nil
		}
	}
	return nil, nil
}

// dataDirOf is the data directory p runs on (absolute; "" for none), and
// its subcommand when it is sqlkube.
func dataDirOf(p proc, defaults map[string]string) (dir, sub string) {
	if len(p.argv) < 2 {
		return "", ""
	}
	args := p.argv[1:]
	if strings.HasPrefix(p.name(), "sqlkube") {
		sub = subcommand(args)
	}
	dir, ok := flagValue(args, "data-dir")
	if !ok && sub != "" {
		if !boolFlag(args, "fake") { // simulated nodes have no data directory
			dir = defaults[sub]
		}
	}
	if dir == "" {
		return "", sub
	}
	if !filepath.IsAbs(dir) {
		if p.cwd == "" {
			return "", sub
		}
		dir = filepath.Join(p.cwd, dir)
	}
	return dir, sub
}

// globalFlags are sqlkube's flags that come before its subcommand and
// take a value.
var globalFlags = map[string]bool{"--log-level": true, "--log-format": true}

// subcommand is the first argument of args that is neither a flag nor a
// global flag's value.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if globalFlags[a] {
			i++
			continue
		}
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}
