// Package daemon is containerd itself (github.com/containerd/containerd/v2,
// the version in go.mod) linked into sqlkube: its daemon, run by a node as
// the hidden `sqlkube containerd`, and its client tool, `sqlkube ctr`. The
// runc shim and runc are separate binaries (docs/node.md says why).
//
// Only the plugins a node uses are linked: those of containerd's own
// builtins (cmd/containerd/builtins) but the btrfs, ZFS and devmapper
// snapshotters (sqlkube configures overlayfs) and the OpenTelemetry
// exporter.
package daemon

import (
	"context"

	"github.com/containerd/containerd/v2/cmd/containerd/command"
	"github.com/containerd/containerd/v2/cmd/ctr/app"

	// containerd's builtins (cmd/containerd/builtins/builtins.go).
	_ "github.com/containerd/containerd/v2/core/runtime/v2"
	_ "github.com/containerd/containerd/v2/plugins/content/local/plugin"
	_ "github.com/containerd/containerd/v2/plugins/events"
	_ "github.com/containerd/containerd/v2/plugins/gc"
	_ "github.com/containerd/containerd/v2/plugins/imageverifier"
	_ "github.com/containerd/containerd/v2/plugins/leases"
	_ "github.com/containerd/containerd/v2/plugins/metadata"
	_ "github.com/containerd/containerd/v2/plugins/mount"
	_ "github.com/containerd/containerd/v2/plugins/mount/fsview/erofs"
	_ "github.com/containerd/containerd/v2/plugins/nri"
	_ "github.com/containerd/containerd/v2/plugins/restart"
	_ "github.com/containerd/containerd/v2/plugins/sandbox"
	_ "github.com/containerd/containerd/v2/plugins/server/debug"
	_ "github.com/containerd/containerd/v2/plugins/server/grpc"
	_ "github.com/containerd/containerd/v2/plugins/server/metrics"
	_ "github.com/containerd/containerd/v2/plugins/server/ttrpc"
	_ "github.com/containerd/containerd/v2/plugins/services/containers"
	_ "github.com/containerd/containerd/v2/plugins/services/content"
	_ "github.com/containerd/containerd/v2/plugins/services/diff"
	_ "github.com/containerd/containerd/v2/plugins/services/events"
	_ "github.com/containerd/containerd/v2/plugins/services/healthcheck"
	_ "github.com/containerd/containerd/v2/plugins/services/images"
	_ "github.com/containerd/containerd/v2/plugins/services/introspection"
	_ "github.com/containerd/containerd/v2/plugins/services/leases"
	_ "github.com/containerd/containerd/v2/plugins/services/mounts"
	_ "github.com/containerd/containerd/v2/plugins/services/namespaces"
	_ "github.com/containerd/containerd/v2/plugins/services/opt"
	_ "github.com/containerd/containerd/v2/plugins/services/sandbox"
	_ "github.com/containerd/containerd/v2/plugins/services/snapshots"
	_ "github.com/containerd/containerd/v2/plugins/services/streaming"
	_ "github.com/containerd/containerd/v2/plugins/services/tasks"
	_ "github.com/containerd/containerd/v2/plugins/services/transfer"
	_ "github.com/containerd/containerd/v2/plugins/services/version"
	_ "github.com/containerd/containerd/v2/plugins/services/warning"
	_ "github.com/containerd/containerd/v2/plugins/streaming"
	_ "github.com/containerd/containerd/v2/plugins/transfer"

	// Linux's (cmd/containerd/builtins/builtins_linux.go).
	_ "github.com/containerd/containerd/api/types/runc/options"
	_ "github.com/containerd/containerd/v2/core/metrics/cgroups"
	_ "github.com/containerd/containerd/v2/core/metrics/cgroups/v2"
	_ "github.com/containerd/containerd/v2/plugins/diff/erofs/plugin"
	_ "github.com/containerd/containerd/v2/plugins/diff/walking/plugin"
	_ "github.com/containerd/containerd/v2/plugins/mount/erofs"
	_ "github.com/containerd/containerd/v2/plugins/snapshots/blockfile/plugin"
	_ "github.com/containerd/containerd/v2/plugins/snapshots/erofs/plugin"
	_ "github.com/containerd/containerd/v2/plugins/snapshots/native/plugin"
	_ "github.com/containerd/containerd/v2/plugins/snapshots/overlay/plugin"

	// The CRI (cmd/containerd/builtins/cri.go).
	_ "github.com/containerd/containerd/v2/plugins/cri"
	_ "github.com/containerd/containerd/v2/plugins/cri/images"
	_ "github.com/containerd/containerd/v2/plugins/cri/runtime"
)

// Containerd runs containerd's daemon command with args (its flags, e.g.
// --config FILE), as the containerd binary would; it returns when the
// daemon stops (SIGTERM).
func Containerd(ctx context.Context, args []string) error {
	return command.App().Run(ctx, append([]string{"containerd"}, args...))
}

// Ctr runs containerd's ctr with args.
func Ctr(ctx context.Context, args []string) error {
	return app.New().Run(ctx, append([]string{"ctr"}, args...))
}
