package kubelet

import (
	"fmt"
	"hash/fnv"
	"path/filepath"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// CgroupRoot is the cgroup (in cgroupfs form: the same path in every
// hierarchy) under which the kubelet of the node whose directory is dir
// keeps its pods, as a kubeadm or k3s node keeps them under "/":
// CgroupRoot/kubepods, the burstable and besteffort classes below it,
// and a cgroup per pod (pod<UID>) holding the pod's containers. The
// kubelet sets a pod's limits on its cgroup and resizes pods in place
// through it.
//
// Each node has its own, named after its directory (absolute, symbolic
// links resolved): several nodes may share a host's cgroup tree, and a
// kubelet removes, killing what runs in them, the pod cgroups under its
// root that are not its pods'. The node leaves the tree when it stops,
// as its containers stay; `sqlkube reset` removes it.
func CgroupRoot(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			dir = real
		}
	}
	h := fnv.New64a()
	h.Write([]byte(dir))
	return fmt.Sprintf("/sqlkube/%016x", h.Sum64())
}

// ensureCgroupRoot creates the cgroup root in every hierarchy, as the
// kubelet's own cgroup manager creates its cgroups (runc's library, its
// Apply without a process): the kubelet refuses to start when its root is
// missing from one of them. On cgroup v2 the controllers are enabled
// along the path.
func ensureCgroupRoot(root string) error {
	if filepath.Clean("/"+root) == "/" {
		return nil
	}
	m, err := manager.New(&cgroups.Cgroup{Path: root, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return fmt.Errorf("kubelet: the cgroup root %s: %w", root, err)
	}
	if err := m.Apply(-1); err != nil {
		return fmt.Errorf("kubelet: creating the cgroup root %s: %w", root, err)
	}
	return nil
}

// cgroupsV2 tells whether the host mounts the cgroup v2 unified hierarchy
// at /sys/fs/cgroup, as the kubelet's own check does.
func cgroupsV2() bool { return cgroups.IsCgroup2UnifiedMode() }
