package reset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// keptDirs are the directories reset never removes, empty or not: the
// parents of what the node's components make outside its data directory.
var keptDirs = map[string]bool{"/": true, "/run": true, "/var": true, "/var/run": true, "/var/lib": true, "/var/log": true, "/tmp": true}

// removeEmptyParents removes the parents of path while they are empty,
// up to a directory of keptDirs. An empty directory holds no state: these
// are the ones the runtime, CNI and the kubelet make on a host where none
// was (/run/containerd, /var/lib/cni, /var/log/containers ...). It returns
// the directories removed.
func removeEmptyParents(path string) []string {
	var removed []string
	for dir := filepath.Dir(path); !keptDirs[dir] && dir != "."; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
		removed = append(removed, dir)
	}
	return removed
}

// removeFile removes a file (a directory with what it holds) and then
// its empty parents; one already gone is no error (its parents still go
// when empty). It reports whether the file was there, and the parents
// removed.
func removeFile(path string) (bool, []string, error) {
	_, err := os.Lstat(path)
	there := err == nil
	if there {
		if err := os.RemoveAll(path); err != nil {
			return false, nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, nil, err
	}
	return there, removeEmptyParents(path), nil
}

// canonical is path with its symbolic links resolved, as far as it
// exists: a path a process was given (its data directory through a link,
// say) compares equal to the one reset resolved.
func canonical(path string) string {
	path = filepath.Clean(path)
	rest := ""
	for p := path; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		if p == filepath.Dir(p) {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// staleSocket reports whether path is a unix socket nothing listens on.
func staleSocket(path string) bool {
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return false
	}
	c, err := dialUnix(path)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// linksInto lists the symbolic links of dir whose targets are in target
// (the kubelet's links to its pods' logs, in /var/log/containers).
func linksInto(dir, target string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if dest, err := os.Readlink(p); err == nil && under(canonical(dest), target) {
			out = append(out, p)
		}
	}
	return out
}

// plural is a kind's plural ("cgroup", "cgroups"; "pod sandbox", "pod
// sandboxes").
func plural(kind string) string {
	switch {
	case strings.HasSuffix(kind, "s"), strings.HasSuffix(kind, "x"):
		return kind + "es"
	case strings.HasSuffix(kind, "y"):
		return strings.TrimSuffix(kind, "y") + "ies"
	}
	return kind + "s"
}
