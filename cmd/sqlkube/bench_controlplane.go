package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/bench/cluster"
)

// controlPlaneRun is what one run of `sqlkube bench control-plane`
// measured; fields stay zero for steps not reached.
type controlPlaneRun struct {
	ready            time.Duration
	idleCPU, idleWin time.Duration
	idleRSS          int64
	burst            cluster.BurstResult
	burstCPU         time.Duration
	deploy           cluster.DeploymentResult
	deployCPU        time.Duration
}

// String is one line of key=value fields, in the order they were
// measured, for a script to collect.
func (r controlPlaneRun) String() string {
	f := []string{fmt.Sprintf("ready=%.3fs", r.ready.Seconds())}
	if r.idleWin > 0 {
		f = append(f, fmt.Sprintf("idle_cpu=%.2f%%", 100*r.idleCPU.Seconds()/r.idleWin.Seconds()), fmt.Sprintf("idle_rss=%.1fMiB", mib(r.idleRSS)))
	}
	if r.burst.Elapsed > 0 {
		f = append(f, fmt.Sprintf("creates=%.0f/s", r.burst.PerSecond()),
			fmt.Sprintf("create_p50=%.1fms", ms(r.burst.P50)), fmt.Sprintf("create_p99=%.1fms", ms(r.burst.P99)),
			fmt.Sprintf("creates_cpu=%.2fs", r.burstCPU.Seconds()))
	}
	if r.deploy.Available > 0 {
		f = append(f, fmt.Sprintf("deploy_running=%.3fs", r.deploy.Running.Seconds()),
			fmt.Sprintf("deploy_available=%.3fs", r.deploy.Available.Seconds()), fmt.Sprintf("deploy_cpu=%.2fs", r.deployCPU.Seconds()))
	}
	return strings.Join(f, " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newBenchControlPlaneCommand() *cobra.Command {
	var (
		kubeconfig, sqlkubeBin string
		pid                    int
		warmup, idle, timeout  time.Duration
		pods, workers          int
		nodes, replicas        int
	)
	cmd := &cobra.Command{
		Use:   "control-plane --kubeconfig PATH --server-pid PID",
		Short: "Measure a control plane that is starting (sqlkube server, or a peer such as k3s): ready, idle, a burst of pod creates, a Deployment on simulated nodes",
		Long: `control-plane measures one API server process that was just started by
someone else (sqlkube server, or a peer such as k3s's server), from the
outside: through the admin kubeconfig it writes and the process's /proc
entries. Steps, in order:

  ready       from the process's start (/proc) until the kubeconfig exists,
              /readyz answers ok and namespace default has its default
              ServiceAccount (polled every 20 ms)
  idle        after --warmup, the server's CPU over --idle (% of a core) and
              its RSS at the end
  creates     --pods pods created from --workers goroutines at once (one
              client, JSON, no client-side rate limit) in a new namespace;
              no scheduler takes them (their schedulerName names none);
              creates/s over the burst, p50/p99 latency, the server's CPU;
              then they are deleted
  deployment  ` + "`sqlkube node --fake --count --nodes`" + ` against the kubeconfig; once
              the nodes are Ready, a Deployment of --replicas (bench deployment's
              pods): create to every pod Running and to the Deployment
              available, and the server's CPU from the create to available

It prints one line of key=value fields (ready=, idle_cpu=, idle_rss=,
creates=, create_p50=, create_p99=, creates_cpu=, deploy_running=,
deploy_available=, deploy_cpu=); a step that fails ends the line and the
command exits non-zero.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kubeconfig == "" || pid == 0 {
				return errors.New("give --kubeconfig and --server-pid")
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var r controlPlaneRun
			err := runControlPlane(ctx, &r, controlPlaneOptions{
				kubeconfig: kubeconfig, sqlkubeBin: sqlkubeBin, pid: pid,
				warmup: warmup, idle: idle, pods: pods, workers: workers, nodes: nodes, replicas: replicas,
			})
			fmt.Fprintln(cmd.OutOrStdout(), r)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kubeconfig, "kubeconfig", "", "the admin kubeconfig the server writes (it may not exist yet)")
	fl.IntVar(&pid, "server-pid", 0, "the server's process")
	fl.StringVar(&sqlkubeBin, "sqlkube-bin", "", "the sqlkube binary whose node --fake simulates the nodes (default: this one)")
	fl.DurationVar(&warmup, "warmup", 30*time.Second, "wait after ready before the idle window")
	fl.DurationVar(&idle, "idle", time.Minute, "the idle window")
	fl.IntVar(&pods, "pods", 1000, "pods of the create burst (0: skip it)")
	fl.IntVar(&workers, "workers", 20, "creates in flight in the burst")
	fl.IntVar(&nodes, "nodes", 100, "simulated nodes of the Deployment step")
	fl.IntVar(&replicas, "replicas", 1000, "the Deployment's replicas (0: skip the step)")
	fl.DurationVar(&timeout, "timeout", 10*time.Minute, "limit of the whole run")
	return cmd
}

type controlPlaneOptions struct {
	kubeconfig, sqlkubeBin         string
	pid                            int
	warmup, idle                   time.Duration
	pods, workers, nodes, replicas int
}

func runControlPlane(ctx context.Context, r *controlPlaneRun, o controlPlaneOptions) error {
	started, err := cluster.Started(o.pid)
	if err != nil {
		return err
	}
	cfg, err := cluster.WaitReady(ctx, o.kubeconfig)
	if err != nil {
		return err
	}
	r.ready = time.Since(started)

	if err := cluster.Sleep(ctx, o.warmup); err != nil {
		return err
	}
	cpu0, err := cluster.CPUTime(o.pid)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := cluster.Sleep(ctx, o.idle); err != nil {
		return err
	}
	cpu1, err := cluster.CPUTime(o.pid)
	if err != nil {
		return err
	}
	r.idleWin, r.idleCPU = time.Since(t0), cpu1-cpu0
	if r.idleRSS, err = cluster.RSS(o.pid); err != nil {
		return err
	}

	if o.pods > 0 {
		cpu0, _ = cluster.CPUTime(o.pid)
		b, err := cluster.CreateBurst(ctx, cfg, "bench-creates", o.pods, o.workers)
		cpu1, _ = cluster.CPUTime(o.pid)
		if err != nil {
			return err
		}
		r.burst, r.burstCPU = b, cpu1-cpu0
	}

	if o.replicas == 0 {
		return nil
	}
	bin := o.sqlkubeBin
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	nodes, err := startProcess([]string{bin, "node", "--fake", "--count", strconv.Itoa(o.nodes), "--kubeconfig", o.kubeconfig,
		"--name-prefix", "bench-", "--log-level", "warn"})
	if err != nil {
		return err
	}
	defer nodes.Stop()
	var c0, c1 time.Duration
	d, err := cluster.RunDeployment(ctx, cfg, o.nodes, o.replicas, func(phase string) {
		switch phase {
		case "create":
			c0, _ = cluster.CPUTime(o.pid)
		case "available":
			c1, _ = cluster.CPUTime(o.pid)
		}
	})
	if err != nil {
		return err
	}
	r.deploy, r.deployCPU = d, c1-c0
	return nil
}
