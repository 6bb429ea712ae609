//go:build shim_multicall

// This file is only in a measurement build (go build -tags
// shim_multicall; make bench-shim): sqlkube's own binary as containerd's
// runc shim, the way k3s once ran it, to weigh against the separate small
// shim that sqlkube ships (docs/node.md). It runs the shim when the binary
// is started as containerd-shim-runc-v2 (a link to it), or by a shim of
// its own (the shim starts its daemon as os.Executable() with flags only,
// so the choice is passed on in the environment).
package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
)

const shimEnv = "SQLKUBE_MULTICALL_SHIM"

func init() {
	if filepath.Base(os.Args[0]) != "containerd-shim-runc-v2" && os.Getenv(shimEnv) != "1" {
		return
	}
	_ = os.Setenv(shimEnv, "1")
	// The shim starts every plugin registered in the process: in this
	// binary those are containerd's daemon's too. Only the runc task
	// service, as the shim's own binary registers it
	// (task/plugin/plugin_linux.go), and what pkg/shim adds itself.
	registry.Reset()
	registry.Register(&plugin.Registration{
		Type:     plugins.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugins.EventPlugin, plugins.InternalPlugin},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			pp, err := ic.GetByID(plugins.EventPlugin, "publisher")
			if err != nil {
				return nil, err
			}
			ss, err := ic.GetByID(plugins.InternalPlugin, "shutdown")
			if err != nil {
				return nil, err
			}
			return task.NewTaskService(ic.Context, pp.(shim.Publisher), ss.(shutdown.Service))
		},
	})
	// Its flags are the standard library's, where Kubernetes' packages
	// have registered theirs (a -version among them).
	flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	shim.RunShim(context.Background(), manager.NewShimManager("io.containerd.runc.v2"))
	os.Exit(0)
}
