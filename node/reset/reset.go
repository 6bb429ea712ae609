// Package reset removes from a host what a sqlkube node (the one `sqlkube
// server` runs for its host, or `sqlkube node`'s) leaves on it once it has
// stopped: its containers and their shims, the mounts under its data
// directory, its containers' and its kubelet's cgroups, its pod network
// (bridge, veths, the pods' network namespaces, routes to other nodes'
// pods, the masquerade chain, host-port rules, CNI state) and the
// kubelet's and kube-proxy's rules, and, when asked, the data directory
// itself.
//
// Everything it removes is found from the data directory, never by a
// name another runtime could share: containers from containerd's bundles
// there (and runc's state naming their root filesystems there), shims by
// the socket of the node's containerd, network namespaces and CNI results
// from those containers and from the CNI cache entries naming the node's
// IP lease directory, the bridge and the masquerade chain from the pod
// CIDR of the node's CNI configuration. What is shared by nature (the
// kubelet's and kube-proxy's chains, which `kube-proxy --cleanup`
// removes whoever wrote them, and empty parent directories and cgroups)
// goes too. It works on the network namespace it runs in: the node's,
// which is the host's unless the node was started in another.
package reset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	deviceplugin "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet"

	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/mounts"
	"github.com/sqlkube/sqlkube/node/podnet"
)

// Options say where a node's things are. The paths are absolute, with
// symbolic links resolved.
type Options struct {
	// DataDir is the node's data directory.
	DataDir string
	// ContainerdDir is its containerd's directory (node/containerd's
	// Options.Dir).
	ContainerdDir string
	// PodLogsDir is the kubelet's pod log directory, where the links of
	// /var/log/containers point.
	PodLogsDir string
	// CNIConfDir and IPAMDir are its pod network's configuration and IP
	// lease directories (node/podnet's Options).
	CNIConfDir, IPAMDir string
	// CgroupRoot is the kubelet's cgroup root (node/kubelet's
	// CgroupRoot), removed with everything below it in every hierarchy
	// (what still runs there killed); "" for none.
	CgroupRoot string
	// Runc is the runc that deletes what is left of containers (default:
	// the runc on PATH); sqlkube's is the one its node runs (the one
	// beside sqlkube, node/containerd.Find).
	Runc string
	// Children are the hidden subcommands a node agent runs itself in
	// child processes ("kubelet", "kube-proxy").
	Children []string
	// DefaultDataDirs are the data directories of sqlkube's subcommands
	// ("server", "node") given without --data-dir, relative to their
	// working directory (FindHolder).
	DefaultDataDirs map[string]string
	// Purge removes DataDir at the end, when everything else went.
	Purge bool
	// Out gets a line for each thing removed.
	Out io.Writer
}

// Summary counts what Run removed, by kind ("container", "mount" ...).
type Summary struct {
	Counts map[string]int
	kinds  []string // in the order first met
}

// String is the summary in one line: "3 containers, 12 mounts, ...".
func (s Summary) String() string {
	if len(s.kinds) == 0 {
		return "nothing to remove"
	}
	parts := make([]string, 0, len(s.kinds))
	for _, k := range s.kinds {
		n := s.Counts[k]
		if n != 1 {
			k = plural(k)
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	return strings.Join(parts, ", ")
}

// report writes a line per thing and counts them.
type report struct {
	out io.Writer
	sum Summary
}

func (r *report) add(verb, kind, name string) {
	if r.out != nil {
		fmt.Fprintf(r.out, "%s %s %s\n", verb, kind, name)
	}
	if r.sum.Counts == nil {
		r.sum.Counts = map[string]int{}
	}
	if r.sum.Counts[kind] == 0 {
		r.sum.kinds = append(r.sum.kinds, kind)
	}
	r.sum.Counts[kind]++
}

// removeFile removes path (and its empty parents), reporting them.
func (r *report) removeFile(path string) error {
	there, parents, err := removeFile(path)
	if there {
		r.add("removed", "file", path)
	}
	for _, p := range parents {
		r.add("removed", "directory", p)
	}
	return err
}

// Run removes what the node of o left on this host, going on past
// failures (it returns them all). It refuses (ErrRunning) while a server
// or node runs on o.DataDir.
func Run(ctx context.Context, o Options) (Summary, error) {
	r := &report{out: o.Out}
	if h, err := FindHolder(o.DataDir, o.DefaultDataDirs); err != nil {
		return r.sum, err
	} else if h != nil {
		return r.sum, fmt.Errorf("%w: %s runs on %s; stop it first", ErrRunning, h, o.DataDir)
	}
	var errs []error
	fail := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	// What is the node's: its containers, their sandboxes, their network
	// namespaces.
	stateDir := containerd.StateDir(o.ContainerdDir)
	socket := containerd.Socket(o.ContainerdDir)
	tasks, err := findTasks(stateDir)
	fail(err)
	attachments, err := cniAttachments(cniCacheDir)
	fail(err)
	podCIDR, err := podnet.ConfiguredPodCIDR(o.CNIConfDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		fail(err)
	}
	sandboxes, netns := map[string]bool{}, map[string]bool{}
	for _, t := range tasks {
		if t.sandbox {
			sandboxes[t.id] = true
		}
		if t.netns != "" {
			netns[t.netns] = true
		}
	}
	for _, a := range attachments {
		if a.network == podnet.NetworkName && a.ipamDir != "" && canonical(a.ipamDir) == o.IPAMDir {
			sandboxes[a.containerID] = true
		}
	}
	for _, a := range attachments {
		if sandboxes[a.containerID] && a.netns != "" {
			netns[a.netns] = true
		}
	}

	fail(r.stopContainers(ctx, o, socket, tasks))
	points, err := mounts.UnmountUnder(o.DataDir)
	for _, p := range points {
		r.add("unmounted", "mount", p)
	}
	fail(err)
	fail(r.removeNetwork(ctx, podCIDR, sandboxes, netns))
	fail(r.removeHostFiles(o, tasks, attachments, sandboxes))

	// The pod network's state in the data directory: leases of IPs no pod
	// holds now, and the configuration podnet writes again at start.
	if _, err := os.Stat(o.IPAMDir); err == nil {
		fail(os.RemoveAll(o.IPAMDir))
		r.add("removed", "directory", o.IPAMDir)
	}
	if conf := filepath.Join(o.CNIConfDir, podnet.ConfigFile); fileExists(conf) {
		fail(os.Remove(conf))
		r.add("removed", "file", conf)
	}

	if o.Purge {
		if len(errs) > 0 {
			errs = append(errs, fmt.Errorf("%s is kept: what it names is needed to run reset again once the above is fixed", o.DataDir))
		} else if left, err := mounts.Under(o.DataDir); err != nil || len(left) > 0 {
			errs = append(errs, fmt.Errorf("%s is kept: still mounted below it: %v %v", o.DataDir, left, err))
		} else if err := os.RemoveAll(o.DataDir); err != nil {
			errs = append(errs, err)
		} else {
			r.add("removed", "directory", o.DataDir)
		}
	}
	return r.sum, errors.Join(errs...)
}

// stopContainers stops the node's runtime and everything it runs: the
// kubelet and kube-proxy children if left, its pods through CRI when its
// containerd answers, then what is left of containerd, the containers
// (with runc, and by their cgroups) and the shims.
func (r *report) stopContainers(ctx context.Context, o Options, socket string, tasks []task) error {
	var errs []error
	// A kubelet left running would start the pods again.
	children, err := childProcs(o.DataDir, o.Children)
	errs = append(errs, err)
	for _, p := range children {
		name := subcommand(p.argv[1:])
		if err := stopAll(ctx, []int{p.pid}, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s (pid %d): %w", name, p.pid, err))
			continue
		}
		r.add("stopped", "process", fmt.Sprintf("%s (pid %d)", name, p.pid))
	}
	removed, answered, err := removeSandboxesCRI(ctx, socket)
	for _, n := range removed {
		r.add("removed", "pod sandbox", n)
	}
	errs = append(errs, err)

	pids, err := containerdProcs(containerd.ConfigFile(o.ContainerdDir))
	errs = append(errs, err)
	if len(pids) == 0 && answered {
		errs = append(errs, fmt.Errorf("a containerd answers on %s, but none runs with %s", socket, containerd.ConfigFile(o.ContainerdDir)))
	}
	for _, pid := range pids {
		if err := stopAll(ctx, []int{pid}, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("containerd (pid %d): %w", pid, err))
			continue
		}
		r.add("stopped", "process", fmt.Sprintf("containerd (pid %d)", pid))
	}

	runc, runcErr := o.Runc, error(nil)
	if runc == "" {
		runc, runcErr = exec.LookPath("runc")
	}
	roots, err := cgroupRoots()
	errs = append(errs, err)
	for _, t := range tasks {
		state := filepath.Join(containerd.RuncRoot, t.ns, t.id)
		found := fileExists(state)
		if found && runcErr == nil {
			errs = append(errs, runcDelete(ctx, runc, t))
		}
		if t.cgroup != "" {
			ok, err := removeCgroup(ctx, roots, t.cgroup)
			errs = append(errs, err)
			if ok {
				r.add("removed", "cgroup", t.cgroup)
			}
			found = found || ok
		}
		if fileExists(state) { // runc missing, or it failed
			errs = append(errs, os.RemoveAll(state))
		}
		if found {
			r.add("removed", "container", t.String())
		}
	}
	// The kubelet's cgroups: its root, the QoS classes' and the pods'
	// cgroups below it, which outlive the containers.
	if o.CgroupRoot != "" {
		ok, err := removeCgroup(ctx, roots, o.CgroupRoot)
		errs = append(errs, err)
		if ok {
			r.add("removed", "cgroup", o.CgroupRoot)
		}
	}

	shims, err := findShims(socket)
	errs = append(errs, err)
	for _, s := range shims {
		if err := kill(ctx, []int{s.pid}, syscall.SIGKILL, 0); err != nil {
			errs = append(errs, fmt.Errorf("shim (pid %d): %w", s.pid, err))
			continue
		}
		r.add("killed", "shim", fmt.Sprintf("pid %d (%s)", s.pid, short(s.id)))
	}
	// A shim removes its socket when it exits; a killed one leaves it.
	// Either way its directory goes once empty.
	seen := map[string]bool{}
	for _, t := range tasks {
		if t.shimSocket == "" || seen[t.shimSocket] || fileExists(t.shimSocket) && !staleSocket(t.shimSocket) {
			continue
		}
		seen[t.shimSocket] = true
		errs = append(errs, r.removeFile(t.shimSocket))
	}
	return errors.Join(errs...)
}

// removeNetwork removes the pod network from this network namespace: the
// bridge of podCIDR ("" for none) with its veths, the sandboxes' network
// namespaces, podnet's routes, the pod network's, the kubelet's and
// kube-proxy's rules.
func (r *report) removeNetwork(ctx context.Context, podCIDR string, sandboxes, netns map[string]bool) error {
	var errs []error
	var bridge string
	var br netlink.Link
	var ports []netlink.Link
	if podCIDR != "" {
		bridge = podnet.BridgeName(podCIDR)
		var err error
		br, ports, err = bridgePorts(bridge)
		errs = append(errs, err)
	}
	for _, l := range ports {
		if err := deleteLink(l); err != nil {
			errs = append(errs, fmt.Errorf("remove veth %s: %w", l.Attrs().Name, err))
			continue
		}
		r.add("removed", "veth", l.Attrs().Name)
	}
	for _, p := range sortedKeys(netns) {
		if fileExists(p) {
			if err := removeNetns(p); err != nil {
				errs = append(errs, err)
				continue
			}
			r.add("removed", "network namespace", netnsName(p))
		}
		for _, d := range removeEmptyParents(p) {
			r.add("removed", "directory", d)
		}
	}
	if br != nil {
		if err := deleteLink(br); err != nil {
			errs = append(errs, fmt.Errorf("remove bridge %s: %w", bridge, err))
		} else {
			r.add("removed", "bridge", bridge)
		}
	}
	routes, err := podRoutes()
	errs = append(errs, err)
	for _, rt := range routes {
		if err := netlink.RouteDel(&rt); err != nil {
			errs = append(errs, fmt.Errorf("remove route %s: %w", routeString(rt), err))
			continue
		}
		r.add("removed", "route", routeString(rt))
	}

	ipts := iptablesClients()
	chainsBefore, nftBefore := chainSet(ipts), nftTables(ctx)
	for _, ipt := range ipts {
		_, err := podNetworkRules(ipt, podCIDR, sandboxes)
		errs = append(errs, err, kubeletRules(ipt))
	}
	errs = append(errs, cleanupKubeProxy(ctx))
	chainsAfter, nftAfter := chainSet(ipts), nftTables(ctx)
	for _, c := range sortedKeys(chainsBefore) {
		if !chainsAfter[c] {
			fam, name, _ := strings.Cut(c, " ")
			r.add("removed", fam+" chain", name)
		}
	}
	for _, t := range nftBefore {
		if !slices.Contains(nftAfter, t) {
			r.add("removed", "nftables table", strings.TrimPrefix(t, "nftables "))
		}
	}
	return errors.Join(errs...)
}

// removeHostFiles removes what the node's components wrote outside its
// data directory: the CNI cache entries of its sandboxes, runc's state
// of its containers, the kubelet's links to its pods' logs and its
// device-plugin socket once nothing listens there.
func (r *report) removeHostFiles(o Options, tasks []task, attachments []cniAttachment, sandboxes map[string]bool) error {
	var errs []error
	for _, a := range attachments {
		if sandboxes[a.containerID] {
			errs = append(errs, r.removeFile(a.file))
		}
	}
	for _, t := range tasks {
		errs = append(errs, r.removeFile(filepath.Join(containerd.RuncRoot, t.ns, t.id)))
	}
	for _, l := range linksInto(kubelet.ContainerLogsDir, o.PodLogsDir) {
		errs = append(errs, r.removeFile(l))
	}
	if staleSocket(deviceplugin.KubeletSocket) {
		errs = append(errs, r.removeFile(deviceplugin.KubeletSocket))
	}
	return errors.Join(errs...)
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
