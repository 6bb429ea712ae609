package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/node/containerd"
	"github.com/sqlkube/sqlkube/node/kubelet"
	"github.com/sqlkube/sqlkube/node/reset"
)

// defaultDataDirs are the --data-dir defaults of the commands that run on
// a data directory (server.go, node.go): a process of theirs without the
// flag runs on this directory, relative to its working directory.
var defaultDataDirs = map[string]string{"server": "./sqlkube-data", "apiserver": "./sqlkube-data", "node": "./sqlkube-node"}

func newResetCommand(lf *logFlags) *cobra.Command {
	var dataDir string
	var purge bool
	cmd := &cobra.Command{
		Use:   "reset --data-dir DIR [--purge]",
		Short: "Remove what a stopped server's or node's node left on this host: containers, mounts, cgroups, pod network, kube-proxy's rules",
		Long: `reset removes from this host what the node of ` + "`sqlkube server`" + ` or ` + "`sqlkube node`" + ` on
--data-dir left once it stopped: its containers and their shims (through its
containerd when that still answers), the mounts under the data directory
(kubelet, volumes, container root filesystems), the containers' cgroups
and the kubelet's (its root under /sqlkube), its pod network (bridge,
veths, the pods' network namespaces, routes to other nodes' pods, the
masquerade chain, host-port rules, CNI state), the kubelet's iptables chains and kube-proxy's rules of every mode (as
` + "`kube-proxy --cleanup`" + ` does, whoever wrote them). With --purge it then deletes
the data directory (the cluster's database too, for a server).

It refuses while a server or node runs on the data directory, and works on
the network namespace it runs in: run it where the node ran. It prints a
line for each thing it removes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := stderrLogger(lf); err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return errors.New("reset needs root")
			}
			dir, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			if dir, err = filepath.EvalSymlinks(dir); err != nil {
				return fmt.Errorf("--data-dir: %w", err)
			}
			nodeDir := nodeDirOf(dir)
			out := cmd.OutOrStdout()
			rt, _ := containerd.Find(runtimeDirs()...) // without runc, reset does what it can
			sum, err := reset.Run(cmd.Context(), reset.Options{
				DataDir: dir, ContainerdDir: containerdDirOf(dir), PodLogsDir: kubelet.PodLogsDir(nodeDir), Runc: rt.Runc,
				CNIConfDir: cniConfDir(nodeDir), IPAMDir: cniIPAMDir(nodeDir), CgroupRoot: kubelet.CgroupRoot(nodeDir),
				Children:        []string{newKubeletCommand(lf).Name(), newKubeProxyCommand(lf).Name()},
				DefaultDataDirs: defaultDataDirs, Purge: purge, Out: out,
			})
			if errors.Is(err, reset.ErrRunning) {
				return err
			}
			fmt.Fprintf(out, "reset %s: %s\n", dir, sum)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the data directory of the stopped `sqlkube server` or `sqlkube node` (required)")
	cmd.Flags().BoolVar(&purge, "purge", false, "delete the data directory too, once everything else is removed")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}
