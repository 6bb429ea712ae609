package main

import (
	"os"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/node/kubelet"
)

// childCommand runs the hidden command name of this binary in a child
// process, logging JSON at log's level for the supervisor
// (internal/childproc) to log again on log. /proc/self/exe is this
// process's binary even when the file has since been replaced.
func childCommand(log zerolog.Logger, name string, args ...string) []string {
	return append([]string{"/proc/self/exe", "--log-format=json", "--log-level=" + log.GetLevel().String(), name}, args...)
}

// kubeletCommand runs the kubelet in a child process (the hidden
// `sqlkube kubelet`), to which kubelet.Run appends its options file.
func kubeletCommand(log zerolog.Logger) []string { return childCommand(log, "kubelet") }

// newKubeletCommand is `sqlkube kubelet OPTIONS-FILE`: Kubernetes' kubelet
// with the node/kubelet Options in the file (JSON), in the process the
// node agent starts for it (kubelet.Run), which may end on its own.
func newKubeletCommand(lf *logFlags) *cobra.Command {
	return &cobra.Command{
		Use:    "kubelet OPTIONS-FILE",
		Short:  "Run Kubernetes' kubelet (started by a node agent in its own process)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := kubelet.ReadOptions(args[0])
			if err != nil {
				return err
			}
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			o.Log = log
			routeKlogQuiet(log, nil, kubeletQuiet)
			// The node agent is what systemd supervises: the kubelet's
			// READY=1 is not the agent's.
			_ = os.Unsetenv("NOTIFY_SOCKET")
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return kubelet.RunInProcess(ctx, o)
		},
	}
}

// kubeletRegistered is the kubelet's line once its Node is registered.
const kubeletRegistered = "Successfully registered node"

// kubeletQuiet are the kubelet's warnings of what is normal at a node's
// start, logged at debug level (docs/logging.md):
//   - until the Node is registered, the kubelet's loops look for it and
//     warn that it is not there yet;
//   - until its first relist the pod lifecycle (PLEG) is "not healthy";
//   - on a node's first start the device manager has no checkpoint, and
//     image garbage collection, which runs once stats are in, fails once;
//   - containerd's CRI reports no separate image filesystem label, which
//     the eviction manager says it ignores;
//   - in a container the kubelet cannot find the pid namespace of the
//     host's init to give its runtime an OOM score.
var kubeletQuiet = []quietLine{
	{message: "Error getting the current node from lister", err: "not found", until: kubeletRegistered},
	{message: "Error updating node status, will retry", err: "not found", until: kubeletRegistered},
	{message: "Unable to register mirror pod because node is not registered yet", until: kubeletRegistered},
	{message: "Failed to get node when trying to set owner ref to the node lease", err: "not found", until: kubeletRegistered},
	{message: "Eviction manager: failed to get summary stats", err: "not found", until: kubeletRegistered},
	{message: "Skipping pod synchronization", err: "pleg has yet to be successful", until: kubeletRegistered},
	{message: "Failed to read data from checkpoint", err: "checkpoint is not found"},
	{message: "Image garbage collection failed once. Stats initialization may not have completed yet"},
	{message: "eviction manager: failed to check if we have separate container filesystem. Ignoring.", err: "no imagefs label"},
	{message: "Failed to ensure process in container with oom score", err: "failed to find pid namespace of init process"},
}
