package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	deviceplugin "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// hostSnapshot is the state a node changes on its host, aspect by aspect
// ("links", "mounts" ...), each a sorted list of lines.
type hostSnapshot map[string][]string

// netnsAspects are the aspects read in the node's network namespace; the
// others are the host's.
var netnsAspects = []string{"links", "routes", "iptables", "ip6tables", "nftables"}

// nodeFileRoots are where a node's runtime, CNI and kubelet write outside
// its data directory (found by listing what changed on a host while a
// node ran pods): runc's state and shims' sockets, the CNI result cache,
// the kubelet's device-plugin socket and its links to pods' logs; and
// /etc/cni and /var/log/pods, which the upstream defaults would use.
var nodeFileRoots = []string{"/run/containerd", "/var/lib/cni", "/etc/cni", filepath.Dir(filepath.Clean(deviceplugin.DevicePluginPath)), "/var/log/containers", "/var/log/pods"}

// snapshotHost reads the network state of the network namespace netns
// (links and their addresses, routes of every table, iptables and
// ip6tables rules of every table, the nftables ruleset, without counters)
// and the host's mounts, network namespace files, files under
// nodeFileRoots, cgroups and processes (but this test's own).
func snapshotHost(t *testing.T, netns string) hostSnapshot {
	t.Helper()
	s := hostSnapshot{}
	// Processes first, before this snapshot's own commands run.
	s["processes"] = processLines(t)
	in := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + netns, "--"}, args...)...).Output()
		if err != nil {
			t.Fatalf("in %s: %s: %v", netns, strings.Join(args, " "), err)
		}
		return out
	}
	s["links"] = linkLines(t, in("ip", "-j", "-d", "addr", "show"))
	s["routes"] = append(routeLines(t, in("ip", "-j", "-4", "route", "show", "table", "all")), routeLines(t, in("ip", "-j", "-6", "route", "show", "table", "all"))...)
	s["iptables"] = iptablesLines(string(in("iptables-save")))
	s["ip6tables"] = iptablesLines(string(in("ip6tables-save")))
	s["nftables"] = nftLines(t, in("nft", "-j", "list", "ruleset"))

	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, _ := strings.Cut(line, " - ")
		if f, g := strings.Fields(pre), strings.Fields(post); len(f) > 4 && len(g) > 0 {
			s["mounts"] = append(s["mounts"], f[4]+" "+g[0])
		}
	}
	s["netns"] = fileLines("/run/netns")
	for _, root := range nodeFileRoots {
		s["files"] = append(s["files"], fileLines(root)...)
	}
	for _, root := range cgroupRootsOf(string(mi)) {
		s["cgroups"] = append(s["cgroups"], cgroupLines(root)...)
	}
	for _, lines := range s {
		sort.Strings(lines)
	}
	return s
}

// linkLines: each link's name, kind, master and addresses (ip -j addr).
func linkLines(t *testing.T, js []byte) []string {
	var links []struct {
		Name     string `json:"ifname"`
		Master   string `json:"master"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
		Addrs []struct {
			Local     string `json:"local"`
			Prefix    int    `json:"prefixlen"`
			Tentative bool   `json:"tentative"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(js, &links); err != nil {
		t.Fatalf("ip -j addr: %v", err)
	}
	var out []string
	for _, l := range links {
		line := fmt.Sprintf("%s kind=%s master=%s", l.Name, l.LinkInfo.Kind, l.Master)
		for _, a := range l.Addrs {
			line += fmt.Sprintf(" %s/%d", a.Local, a.Prefix)
		}
		out = append(out, line)
	}
	return out
}

// routeLines: each route's table, type, destination, gateway, device and
// protocol (ip -j route).
func routeLines(t *testing.T, js []byte) []string {
	var routes []map[string]any
	if err := json.Unmarshal(js, &routes); err != nil {
		t.Fatalf("ip -j route: %v", err)
	}
	var out []string
	for _, r := range routes {
		out = append(out, fmt.Sprintf("table=%v type=%v %v via=%v dev=%v proto=%v", r["table"], r["type"], r["dst"], r["gateway"], r["dev"], r["protocol"]))
	}
	return out
}

// iptablesLines is iptables-save without comments and counters, and
// without the tables that hold nothing (only built-in chains, accepting,
// no rule): iptables-nft makes those on first use, and they change no
// packet's fate.
func iptablesLines(save string) []string {
	var out, table []string
	empty := true
	for _, line := range strings.Split(save, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			table, empty = []string{line}, true
		case line == "COMMIT":
			if !empty {
				out = append(out, table...)
			}
		case strings.HasPrefix(line, ":"):
			f := strings.Fields(line)
			if len(f) > 1 && f[1] != "ACCEPT" {
				empty = false // a user chain ("-"), or a dropping policy
			}
			table = append(table, table[0]+" "+strings.Join(f[:min(2, len(f))], " "))
		default:
			empty = false
			table = append(table, table[0]+" "+line)
		}
	}
	return out
}

// nftLines is the nftables ruleset (nft -j) as lines without handles and
// counters, and without the tables that hold nothing: no rule, set or
// map, and only base chains that accept (iptables-nft's, made on first
// use).
func nftLines(t *testing.T, js []byte) []string {
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("nft -j list ruleset: %v", err)
	}
	lines := map[string][]string{} // by "family table"
	full := map[string]bool{}
	for _, obj := range doc.Nftables {
		for kind, v := range obj {
			if kind == "metainfo" {
				continue
			}
			tbl := fmt.Sprintf("%v %v", v["family"], v["table"])
			if kind == "table" {
				tbl = fmt.Sprintf("%v %v", v["family"], v["name"])
			}
			delete(v, "handle")
			if kind == "rule" {
				v["expr"] = withoutCounters(v["expr"])
			}
			if kind == "chain" && (v["hook"] == nil || v["policy"] != "accept") || kind != "chain" && kind != "table" {
				full[tbl] = true
			}
			b, _ := json.Marshal(v)
			lines[tbl] = append(lines[tbl], kind+" "+string(b))
		}
	}
	var out []string
	for tbl, ls := range lines {
		if full[tbl] {
			out = append(out, ls...)
		}
	}
	return out
}

func withoutCounters(expr any) any {
	list, ok := expr.([]any)
	if !ok {
		return expr
	}
	var out []any
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["counter"] != nil {
			continue
		}
		out = append(out, e)
	}
	return out
}

// fileLines lists root and what is below it: each path with its kind
// (an empty directory and a socket are marked, since reset may remove
// them: they hold no state).
func fileLines(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		kind := "file"
		switch {
		case d.IsDir():
			kind = "dir"
			if ents, err := os.ReadDir(p); err == nil && len(ents) == 0 {
				kind = "empty-dir"
			}
		case d.Type()&fs.ModeSocket != 0:
			kind = "socket"
		case d.Type()&fs.ModeSymlink != 0:
			dest, _ := os.Readlink(p)
			kind = "link->" + dest
		}
		out = append(out, p+" "+kind)
		return nil
	})
	return out
}

// cgroupRootsOf lists the cgroup hierarchies' mount points of mountinfo.
func cgroupRootsOf(mountinfo string) []string {
	var roots []string
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, _ := strings.Cut(line, " - ")
		if f, g := strings.Fields(pre), strings.Fields(post); len(f) > 4 && len(g) > 0 && (g[0] == "cgroup" || g[0] == "cgroup2") {
			roots = append(roots, f[4])
		}
	}
	return roots
}

// cgroupLines lists the cgroups of a hierarchy; a cgroup without
// sub-cgroups or processes is marked empty (reset may remove it).
func cgroupLines(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		kind := "cgroup"
		procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		ents, _ := os.ReadDir(p)
		if len(bytes.TrimSpace(procs)) == 0 && !slices.ContainsFunc(ents, fs.DirEntry.IsDir) {
			kind = "empty-cgroup"
		}
		out = append(out, p+" "+kind)
		return nil
	})
	return out
}

// processLines lists the host's processes but this test's own (this
// process and its descendants): pid, start time, network namespace,
// cgroup and command line.
func processLines(t *testing.T) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	type proc struct {
		ppid         int
		line         string
		start, netns string
	}
	procs := map[int]proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // gone, or a kernel thread
		}
		// Fields after the command name (in parentheses): state, ppid ...
		// starttime is the 22nd field.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 20 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		netns, _ := os.Readlink(filepath.Join(dir, "ns", "net"))
		cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		cgs := strings.Join(strings.Fields(string(cg)), ",")
		argv := strings.Join(strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00"), " ")
		procs[pid] = proc{ppid: ppid, line: fmt.Sprintf("pid=%d start=%s %s cgroup=%s %s", pid, f[19], netns, cgs, argv)}
	}
	ours := func(pid int) bool {
		for i := 0; i < 64 && pid > 1; i++ {
			if pid == os.Getpid() {
				return true
			}
			pid = procs[pid].ppid
		}
		return false
	}
	var out []string
	for pid, p := range procs {
		if !ours(pid) {
			out = append(out, p.line)
		}
	}
	return out
}

// snapshotDiff is what changed between two snapshots of an aspect.
type snapshotDiff struct {
	aspect         string
	added, missing []string
}

// diffSnapshots lists, aspect by aspect, the lines after has and before
// has not (added) and the other way round (missing).
func diffSnapshots(before, after hostSnapshot) []snapshotDiff {
	var out []snapshotDiff
	aspects := map[string]bool{}
	for a := range before {
		aspects[a] = true
	}
	for a := range after {
		aspects[a] = true
	}
	for _, a := range sortedAspects(aspects) {
		d := snapshotDiff{aspect: a}
		for _, l := range after[a] {
			if !slices.Contains(before[a], l) {
				d.added = append(d.added, l)
			}
		}
		for _, l := range before[a] {
			if !slices.Contains(after[a], l) {
				d.missing = append(d.missing, l)
			}
		}
		if len(d.added)+len(d.missing) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func sortedAspects(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
