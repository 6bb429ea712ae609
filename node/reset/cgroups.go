package reset

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupRoots lists the mount points of the host's cgroup hierarchies
// (cgroup v1 controllers and the v2 unified hierarchy).
func cgroupRoots() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, line := range strings.Split(string(b), "\n") {
		// The filesystem type follows the " - " separator.
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 0 && (g[0] == "cgroup" || g[0] == "cgroup2") {
			roots = append(roots, f[4])
		}
	}
	return roots, nil
}

// removeCgroup removes the cgroup rel (relative to each hierarchy's root;
// with its sub-cgroups) from every hierarchy, killing what still runs in
// it, then its parents below the root while they are left empty. It
// reports whether it removed anything.
func removeCgroup(ctx context.Context, roots []string, rel string) (bool, error) {
	rel = filepath.Clean("/" + rel)
	if rel == "/" || strings.Contains(rel, ":") {
		// The whole tree, or a systemd unit (slice:prefix:name), which
		// sqlkube's cgroupfs nodes never have.
		return false, nil
	}
	removed := false
	var errs []error
	for _, root := range roots {
		dir := filepath.Join(root, rel)
		if _, err := os.Stat(dir); err == nil {
			if err := removeTree(ctx, dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = true
		}
		// The parents go once empty (runc removes a container's own
		// cgroup when it deletes it, never its parents).
		for p := filepath.Dir(dir); p != root && under(p, root); p = filepath.Dir(p) {
			if syscall.Rmdir(p) != nil {
				break // not empty: another container's, or the host's
			}
		}
	}
	return removed, errors.Join(errs...)
}

// removeTree kills the processes of the cgroup dir and of its
// sub-cgroups, and removes them, deepest first.
func removeTree(ctx context.Context, dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		if pids := cgroupProcs(d); len(pids) > 0 {
			if err := kill(ctx, pids, syscall.SIGKILL, 0); err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
				continue
			}
		}
		// A cgroup is removable only once its last process is reaped,
		// which its parent (a shim, or init) does soon after.
		if err := rmdirWhenEmpty(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupProcs lists the processes of the cgroup dir.
func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rmdirWhenEmpty removes the cgroup dir, waiting a few seconds while the
// kernel reports it busy.
func rmdirWhenEmpty(ctx context.Context, dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
