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
			// The node agent is what systemd supervises: the kubelet's
			// READY=1 is not the agent's.
			_ = os.Unsetenv("NOTIFY_SOCKET")
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return kubelet.RunInProcess(ctx, o)
		},
	}
}
