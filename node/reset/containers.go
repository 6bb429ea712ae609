package reset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sqlkube/sqlkube/node/containerd"
)

// taskDir is where containerd's v2 runtime keeps its tasks' bundles, under
// its state directory: taskDir/NAMESPACE/ID.
const taskDir = "io.containerd.runtime.v2.task"

// sandboxAnnotation is the annotation containerd's CRI plugin gives a
// container's OCI spec; its value is "sandbox" for a pod's sandbox.
const sandboxAnnotation = "io.kubernetes.cri.container-type"

// task is a container of the node's containerd that may still run: its
// bundle is in containerd's state directory, or runc's state names its
// root filesystem there.
type task struct {
	ns, id string
	// bundle is its bundle directory ("" when only runc's state is left).
	bundle string
	// sandbox: a pod's sandbox (its pause container).
	sandbox bool
	// cgroup is its cgroup, relative to a hierarchy's root.
	cgroup string
	// netns is the network namespace file a sandbox joins ("" for none).
	netns string
	// shimSocket is the socket of the shim serving it ("" for none).
	shimSocket string
}

func (t task) String() string {
	s := t.ns + "/" + short(t.id)
	if t.sandbox {
		s += " (pod sandbox)"
	}
	return s
}

// ShimSocket is the socket of the shim serving the task whose bundle is
// dir ("" when it names none): containerd 2 records it in the bundle's
// bootstrap.json ({"version":2,"address":"unix://...","protocol":"ttrpc"}),
// containerd 1 in its address file.
func ShimSocket(dir string) string {
	var addr string
	if b, err := os.ReadFile(filepath.Join(dir, "bootstrap.json")); err == nil {
		var params struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(b, &params) == nil {
			addr = params.Address
		}
	} else if b, err := os.ReadFile(filepath.Join(dir, "address")); err == nil {
		addr = strings.TrimSpace(string(b))
	}
	return strings.TrimPrefix(addr, "unix://")
}

// short is an ID's first 12 characters, as crictl shows it.
func short(id string) string { return id[:min(12, len(id))] }

// findTasks lists the tasks of the containerd whose state directory is
// stateDir: their bundles, and the containers of runc's state whose root
// filesystems are in stateDir (a bundle already removed).
func findTasks(stateDir string) ([]task, error) {
	var tasks []task
	var errs []error
	nss, err := os.ReadDir(filepath.Join(stateDir, taskDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, ns := range nss {
		ids, err := os.ReadDir(filepath.Join(stateDir, taskDir, ns.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			t, err := readBundle(filepath.Join(stateDir, taskDir, ns.Name(), id.Name()))
			if err != nil {
				errs = append(errs, err)
			}
			t.ns, t.id = ns.Name(), id.Name()
			tasks = append(tasks, t)
		}
	}
	known := map[string]bool{}
	for _, t := range tasks {
		known[t.ns+"/"+t.id] = true
	}
	states, err := os.ReadDir(containerd.RuncRoot)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, ns := range states {
		ids, _ := os.ReadDir(filepath.Join(containerd.RuncRoot, ns.Name()))
		for _, id := range ids {
			if known[ns.Name()+"/"+id.Name()] {
				continue
			}
			var st struct {
				Config struct {
					Rootfs  string `json:"rootfs"`
					Cgroups struct {
						Path string `json:"path"`
					} `json:"cgroups"`
				} `json:"config"`
			}
			b, err := os.ReadFile(filepath.Join(containerd.RuncRoot, ns.Name(), id.Name(), "state.json"))
			if err != nil || json.Unmarshal(b, &st) != nil || !under(canonical(st.Config.Rootfs), stateDir) {
				continue
			}
			tasks = append(tasks, task{ns: ns.Name(), id: id.Name(), cgroup: st.Config.Cgroups.Path})
		}
	}
	return tasks, errors.Join(errs...)
}

// readBundle reads what reset needs of a task's bundle.
func readBundle(dir string) (task, error) {
	t := task{bundle: dir, shimSocket: ShimSocket(dir)}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
		Linux       struct {
			CgroupsPath string `json:"cgroupsPath"`
			Namespaces  []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return t, nil // created, never started
		}
		return t, err
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return t, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	t.sandbox = spec.Annotations[sandboxAnnotation] == "sandbox"
	t.cgroup = spec.Linux.CgroupsPath
	for _, ns := range spec.Linux.Namespaces {
		// A pod's containers join its sandbox's namespace through
		// /proc/PID/ns/net; the sandbox's own is a file the runtime made.
		if ns.Type == "network" && ns.Path != "" && !strings.HasPrefix(ns.Path, "/proc/") {
			t.netns = ns.Path
		}
	}
	return t, nil
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// RemoveSandboxes stops and removes every pod sandbox of the CRI runtime
// at socket, with their containers and networks, as the kubelet's
// garbage collection removes a deleted pod's (once a minute), and
// returns their names. A runtime that does not answer has none.
func RemoveSandboxes(ctx context.Context, socket string) ([]string, error) {
	removed, _, err := removeSandboxesCRI(ctx, socket)
	return removed, err
}

// removeSandboxesCRI stops and removes every pod sandbox (and with it its
// containers and its network) of the CRI runtime at socket, when it
// answers: the runtime's own way, which tears the pods' network down
// through CNI as the kubelet would. It returns the sandboxes removed and
// whether the runtime answered.
func removeSandboxesCRI(ctx context.Context, socket string) (removed []string, answered bool, err error) {
	if c, err := dialUnix(socket); err != nil {
		return nil, false, nil
	} else {
		c.Close()
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := rt.ListPodSandbox(callCtx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if err != nil {
		return nil, true, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range list.Items {
		name := sb.Id
		if m := sb.Metadata; m != nil {
			name = fmt.Sprintf("%s/%s (%s)", m.Namespace, m.Name, short(sb.Id))
		}
		// Each call may wait for containers to stop (their grace period
		// is the kubelet's business; here they have a few seconds).
		callCtx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := rt.StopPodSandbox(callCtx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
		if err == nil {
			_, err = rt.RemovePodSandbox(callCtx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("remove pod sandbox %s: %w", name, err))
			continue
		}
		removed = append(removed, name)
	}
	return removed, true, errors.Join(errs...)
}

// runcDelete has runc kill and delete a container it knows (its
// processes, its cgroup, its state); a container runc does not know is no
// error.
func runcDelete(ctx context.Context, runc string, t task) error {
	root := filepath.Join(containerd.RuncRoot, t.ns)
	if _, err := os.Stat(filepath.Join(root, t.id)); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, runc, "--root", root, "delete", "--force", t.id).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		return fmt.Errorf("runc delete %s: %v: %s", short(t.id), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// shim is a containerd shim process.
type shim struct {
	pid int
	id  string
}

// findShims lists the shims serving the containerd at socket: containerd
// starts them with -address SOCKET. Paths compare resolved (canonical),
// here and below: reset's are.
func findShims(socket string) ([]shim, error) {
	procs, err := processes()
	if err != nil {
		return nil, err
	}
	var out []shim
	for _, p := range procs {
		if !strings.HasPrefix(p.name(), "containerd-shim") {
			continue
		}
		if addr, _ := flagValue(p.argv[1:], "address"); addr != "" && canonical(addr) == socket {
			id, _ := flagValue(p.argv[1:], "id")
			out = append(out, shim{pid: p.pid, id: id})
		}
	}
	return out, nil
}

// containerdProcs lists the containerd processes started with config:
// sqlkube's (`sqlkube containerd --config FILE`) or a containerd binary.
func containerdProcs(config string) ([]int, error) {
	procs, err := processes()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		if len(p.argv) < 2 || p.name() != "containerd" && subcommand(p.argv[1:]) != "containerd" {
			continue
		}
		if c, _ := flagValue(p.argv[1:], "config"); c != "" && canonical(c) == config {
			pids = append(pids, p.pid)
		}
	}
	return pids, nil
}

// childProcs lists the processes a node agent starts of its own binary
// (sqlkube's hidden subcommands names, e.g. kubelet and kube-proxy) whose
// arguments name a file under dir: they die with the agent, but a child
// may still be stopping, or may have outlived a crash.
func childProcs(dir string, names []string) ([]proc, error) {
	procs, err := processes()
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, p := range procs {
		if len(p.argv) < 2 || !slices.Contains(names, subcommand(p.argv[1:])) {
			continue
		}
		for _, a := range p.argv[1:] {
			if _, v, ok := strings.Cut(a, "="); ok {
				a = v
			}
			if filepath.IsAbs(a) && under(canonical(a), dir) {
				out = append(out, p)
				break
			}
		}
	}
	return out, nil
}

// stopAll ends pids: SIGTERM, then SIGKILL after grace.
func stopAll(ctx context.Context, pids []int, grace time.Duration) error {
	if len(pids) == 0 {
		return nil
	}
	return kill(ctx, slices.Clone(pids), syscall.SIGTERM, grace)
}
