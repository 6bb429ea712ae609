package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/bench/fakenodes"
)

func newBenchFakeNodesCommand() *cobra.Command {
	var (
		o          fakenodes.Options
		kubeconfig string
		simulator  string
		kwokBin    string
		kwokConfig string
		sqlkubeBin string
		extraArgs  []string
	)
	cmd := &cobra.Command{
		Use:   "fake-nodes",
		Short: "Measure a node simulator (sqlkube node --fake, or kwok) against a running API server",
		Long: `fake-nodes starts a simulator as a process of its own against --kubeconfig and
measures how long --nodes nodes take to be Ready, its CPU while they idle,
how fast --pods pods bound to them (spec.nodeName set, no scheduler) go
Running and are confirmed deleted, and its peak RSS. The nodes, their
leases and the pods are deleted afterwards.

--simulator kwok runs --kwok-bin with --kwok-config (its Stage objects; the
bench creates the Node objects, annotated kwok.x-k8s.io/node=fake, as kwok
only manages nodes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kubeconfig == "" {
				return errors.New("give --kubeconfig")
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			cfg.QPS, cfg.Burst = 5000, 10000
			cfg.ContentType = runtime.ContentTypeProtobuf
			if o.Client, err = kubernetes.NewForConfig(cfg); err != nil {
				return err
			}
			o.Logf = func(format string, args ...any) {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %s\n", time.Now().Format(time.TimeOnly), simulator, fmt.Sprintf(format, args...))
			}
			var argv []string
			switch simulator {
			case "sqlkube":
				self := sqlkubeBin
				if self == "" {
					if self, err = os.Executable(); err != nil {
						return err
					}
				}
				o.NodePrefix = "bench-sqlkube-"
				argv = []string{self, "node", "--fake", "--count", strconv.Itoa(o.Nodes), "--kubeconfig", kubeconfig, "--name-prefix", o.NodePrefix, "--log-level", "warn"}
				argv = append(argv, extraArgs...)
			case "kwok":
				if kwokConfig == "" {
					return errors.New("--simulator kwok needs --kwok-config (its stages)")
				}
				o.NodePrefix, o.CreateNodes = "bench-kwok-", true
				o.NodeAnnotations = map[string]string{"kwok.x-k8s.io/node": "fake"}
				// The kwok binary renews no Leases unless told their
				// duration (kwokctl passes 40 s, the kubelet's default).
				argv = []string{kwokBin, "--kubeconfig", kubeconfig, "--config", kwokConfig, "--v=WARN",
					"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
					"--node-lease-duration-seconds=40"}
			default:
				return fmt.Errorf("--simulator %q: want sqlkube or kwok", simulator)
			}
			o.Namespace = "bench-" + simulator
			o.Start = func(ctx context.Context) (*fakenodes.Process, error) { return startProcess(argv) }
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			res, err := fakenodes.Run(ctx, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\t%d nodes, %d pods\t%s\n", simulator, o.Nodes, o.Pods, res)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	fl.StringVar(&simulator, "simulator", "sqlkube", "sqlkube or kwok")
	fl.StringVar(&sqlkubeBin, "sqlkube-bin", "", "the sqlkube binary whose node --fake simulates the nodes (default: this one), e.g. another release's")
	fl.StringVar(&kwokBin, "kwok-bin", "kwok", "kwok binary")
	fl.StringVar(&kwokConfig, "kwok-config", "", "kwok configuration with its Stage objects")
	fl.IntVar(&o.Nodes, "nodes", 5000, "nodes")
	fl.IntVar(&o.Pods, "pods", 10000, "pods, spread over the nodes")
	fl.DurationVar(&o.Idle, "idle", 2*time.Minute, "how long CPU is sampled once the nodes are Ready")
	fl.DurationVar(&o.Settle, "settle", time.Minute, "wait this long after the nodes are Ready before sampling (registration's aftermath is not idle)")
	fl.IntVar(&o.ServerPID, "server-pid", 0, "the API server's process, to report its CPU per pod too (0: not)")
	fl.StringSliceVar(&extraArgs, "node-args", nil, "more flags for `sqlkube node --fake`")
	fl.IntVar(&o.Workers, "workers", 64, "requests the bench makes at once")
	return cmd
}

// startProcess runs argv with its output on ours; Stop sends SIGTERM and
// waits.
func startProcess(argv []string) (*fakenodes.Process, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Start(); err != nil {
		return nil, err
	}
	return &fakenodes.Process{
		PID: c.Process.Pid,
		Stop: func() error {
			_ = c.Process.Signal(syscall.SIGCONT)
			_ = c.Process.Signal(syscall.SIGTERM)
			return c.Wait()
		},
		Pause:  func() error { return c.Process.Signal(syscall.SIGSTOP) },
		Resume: func() error { return c.Process.Signal(syscall.SIGCONT) },
	}, nil
}
