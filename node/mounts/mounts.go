// Package mounts finds and detaches the mounts under a directory: what a
// kubelet leaves under its root (it bind-mounts the root onto itself, and
// pods' volumes below it) when it stops, so that the directory can be
// removed.
package mounts

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
)

// Under lists the mount points at or below dir (absolute), deepest first,
// from /proc/self/mountinfo.
func Under(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		// Field 5 is the mount point.
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	sort.SliceStable(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points, nil
}

// UnmountUnder unmounts every mount at or below dir, deepest first: each
// is unmounted normally, and detached (MNT_DETACH, a lazy unmount) only
// when that fails, as a last resort. It returns the mount points
// unmounted (one per mount: a point mounted twice is listed twice) and
// what failed.
func UnmountUnder(dir string) ([]string, error) {
	points, err := Under(dir)
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, 0); err != nil {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
				continue
			}
		}
		done = append(done, p)
	}
	return done, errors.Join(errs...)
}

// DetachUnder detaches (MNT_DETACH) every mount at or below dir, deepest
// first, and returns what failed.
func DetachUnder(dir string) error {
	points, err := Under(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
