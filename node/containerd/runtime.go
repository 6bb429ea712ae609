package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The binaries of a Runtime, as `make build` names them beside sqlkube.
const (
	ShimName = "containerd-shim-runc-v2"
	RuncName = "runc"
)

// Runtime is the runc shim and runc that a node's containerd runs pods
// with. They are small programs of their own rather than more names of
// sqlkube's binary: a shim runs for every pod, and in sqlkube's binary
// each would start by initialising all of Kubernetes' packages
// (docs/node.md has the figures).
type Runtime struct {
	// Shim is containerd-shim-runc-v2's path, Runc runc's.
	Shim, Runc string
}

// ErrNoRuntime is returned by Find when the shim or runc is missing.
var ErrNoRuntime = errors.New("containerd: no runc shim or runc")

// Find finds the runc shim and runc in dirs first (sqlkube's: the
// directory of its executable, where `make build` puts them), then on
// PATH. A shim found on PATH must be containerd 2's: a containerd 1.x
// shim (Debian 12's) does not speak containerd 2's start protocol.
func Find(dirs ...string) (Runtime, error) {
	var r Runtime
	var why []string
	for _, d := range dirs {
		if r.Shim == "" && isExecutable(filepath.Join(d, ShimName)) {
			r.Shim = filepath.Join(d, ShimName)
		}
		if r.Runc == "" && isExecutable(filepath.Join(d, RuncName)) {
			r.Runc = filepath.Join(d, RuncName)
		}
	}
	if r.Shim == "" {
		if p, err := exec.LookPath(ShimName); err == nil {
			if v, err := ShimVersion(p); err != nil || !v2(v) {
				why = append(why, fmt.Sprintf("the %s on PATH (%s) is containerd %s's, not containerd 2's", ShimName, p, v))
			} else {
				r.Shim = p
			}
		} else {
			why = append(why, ShimName+" not found")
		}
	}
	if r.Runc == "" {
		if p, err := exec.LookPath(RuncName); err == nil {
			r.Runc = p
		} else {
			why = append(why, RuncName+" not found")
		}
	}
	if len(why) > 0 {
		where := "on PATH"
		if len(dirs) > 0 {
			where = "in " + strings.Join(dirs, ", ") + " or on PATH"
		}
		return r, fmt.Errorf("%w: %s (looked %s; `make runtime` builds both beside sqlkube; runc needs libseccomp-dev)", ErrNoRuntime, strings.Join(why, "; "), where)
	}
	return r, nil
}

// Missing explains what is missing to run containers here with the
// runtime binaries in dirs or on PATH (Find), and the Runtime found: root,
// and the shim and runc, all of it in one error.
func Missing(dirs ...string) (Runtime, error) {
	r, err := Find(dirs...)
	if os.Geteuid() != 0 {
		root := errors.New("running containers needs root (sqlkube runs containerd and the kubelet itself)")
		if err != nil {
			return r, fmt.Errorf("%w; %w", root, err)
		}
		return r, root
	}
	return r, err
}

// ShimVersion is the version a runc shim reports (-v), e.g. "2.4.2".
func ShimVersion(shim string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, shim, "-v").Output()
	if err != nil {
		return "", fmt.Errorf("%s -v: %w", shim, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Version:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s -v printed no version: %q", shim, out)
}

// v2 reports whether version (e.g. "2.4.2", "v2.4.2", "1.6.20~ds1") is
// containerd 2 or later.
func v2(version string) bool {
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 2
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
