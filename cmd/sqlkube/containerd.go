package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/grpclog"

	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/containerd/daemon"
)

// newContainerdCommand is `sqlkube containerd FLAGS`: containerd's daemon,
// linked in (node/containerd/daemon), which a node starts with the
// configuration it writes (node/containerd.Start).
func newContainerdCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "containerd [containerd flags]",
		Short:              "Run containerd (started by a node with its own configuration)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			discardGRPCLogs()
			// containerd handles its signals itself.
			return daemon.Containerd(context.Background(), args)
		},
	}
}

// newCtrCommand is `sqlkube ctr`: containerd's ctr, by default against
// the containerd of `sqlkube server` in ./sqlkube-data, in the namespace of
// the kubelet's containers (CONTAINERD_ADDRESS and CONTAINERD_NAMESPACE,
// or --address and --namespace, choose others).
func newCtrCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "ctr [ctr flags] COMMAND",
		Short:              "Run containerd's ctr against this host's node (default: ./sqlkube-data's containerd, namespace k8s.io)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			discardGRPCLogs()
			if os.Getenv("CONTAINERD_ADDRESS") == "" {
				if dir, err := filepath.Abs(containerdDirOf("sqlkube-data")); err == nil {
					_ = os.Setenv("CONTAINERD_ADDRESS", containerd.Socket(dir))
				}
			}
			if os.Getenv("CONTAINERD_NAMESPACE") == "" {
				_ = os.Setenv("CONTAINERD_NAMESPACE", containerd.Namespace)
			}
			return daemon.Ctr(cmd.Context(), args)
		},
	}
}

// selfCommand runs the hidden command name of this binary.
func selfCommand(name string) []string { return []string{"/proc/self/exe", name} }

// runtimeDirs are where a node looks for the runc shim and runc before
// PATH: beside sqlkube's executable, where `make build` puts them.
func runtimeDirs() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return []string{filepath.Dir(exe)}
}

// containerd's command packages discard gRPC's logs when they are
// initialised, as its own binaries want; sqlkube's other commands get
// gRPC's default back before any gRPC use (main): errors on standard
// error, or the level GRPC_GO_LOG_SEVERITY_LEVEL names, at the verbosity
// GRPC_GO_LOG_VERBOSITY_LEVEL names.
func discardGRPCLogs() { grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard)) }

func defaultGRPCLogs() {
	w := []io.Writer{io.Discard, io.Discard, io.Discard} // info, warning, error
	switch os.Getenv("GRPC_GO_LOG_SEVERITY_LEVEL") {
	case "", "ERROR", "error":
		w[2] = os.Stderr
	case "WARNING", "warning":
		w[1] = os.Stderr
	case "INFO", "info":
		w[0] = os.Stderr
	}
	v, _ := strconv.Atoi(os.Getenv("GRPC_GO_LOG_VERBOSITY_LEVEL"))
	grpclog.SetLoggerV2(grpclog.NewLoggerV2WithVerbosity(w[0], w[1], w[2], v))
}
