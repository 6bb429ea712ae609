package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/bench/cluster"
)

func newBenchNodeCommand(lf *logFlags) *cobra.Command {
	var (
		cf                      clusterFlags
		pods, workers, idlePods int
		rate                    float64
		warmup, window          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Measure this host's real node: pod startup latency, and idle CPU and memory with pods running",
		Long: "Starts `sqlkube server` with its host's node (kubelet and containerd; needs root, containerd,\n" +
			"runc, the CNI plugins and /bin/busybox, from which the pods' image is made and imported),\n" +
			"creates --pods pods and measures each one's create-to-Running latency as a watcher sees it,\n" +
			"then the CPU and RSS of the server, of its kubelet and of its containerd with --idle-pods pods running, and\n" +
			"the same of a server without a node, over --window after --warmup. --runs rounds.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := stderrLogger(lf); err != nil {
				return err
			}
			setup, _, err := cf.setup()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			pct := func(s cluster.IdleSample) float64 { return 100 * s.CPU.Seconds() / s.Window.Seconds() }
			mib := func(s cluster.IdleSample) float64 { return float64(s.RSS) / (1 << 20) }
			for run := 1; run <= cf.runs; run++ {
				fmt.Fprintf(out, "run %d: load average %s\n", run, loadAverage())
				r, err := setup.RunNode(cmd.Context(), pods, workers, rate, idlePods, warmup, window)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "run %d\tpod startup, %d pods (%d at a time, %g/s): p50 %v p90 %v p99 %v max %v; all Running %v after the first create\n",
					run, len(r.Startup), workers, rate, cluster.Percentile(r.Startup, .5).Round(time.Millisecond), cluster.Percentile(r.Startup, .9).Round(time.Millisecond),
					cluster.Percentile(r.Startup, .99).Round(time.Millisecond), r.Startup[len(r.Startup)-1].Round(time.Millisecond), r.StartupWall.Round(time.Millisecond))
				q := func(d []time.Duration) string {
					return fmt.Sprintf("p50 %v p99 %v", cluster.Percentile(d, .5).Round(time.Millisecond), cluster.Percentile(d, .99).Round(time.Millisecond))
				}
				fmt.Fprintf(out, "run %d\tstartup phases, %d pods, by the runtime's times: create → sandbox %s; sandbox → container created %s; created → started %s; started → Running seen %s\n",
					run, len(r.Phases.Start), q(r.Phases.Kubelet), q(r.Phases.Sandbox), q(r.Phases.Start), q(r.Phases.Report))
				fmt.Fprintf(out, "run %d\tidle, %d pods running: server %.2f%% of a core, RSS %.0f MiB; kubelet %.2f%%, RSS %.0f MiB; containerd %.2f%%, RSS %.0f MiB; server without a node %.2f%%, RSS %.0f MiB\n",
					run, r.IdlePods, pct(r.Idle), mib(r.Idle), pct(r.IdleKubelet), mib(r.IdleKubelet), pct(r.IdleContainerd), mib(r.IdleContainerd), pct(r.Bare), mib(r.Bare))
			}
			fmt.Fprintf(out, "load average %s\n", loadAverage())
			return nil
		},
	}
	cmd.Flags().IntVar(&pods, "pods", 100, "pods whose startup is measured")
	cmd.Flags().IntVar(&workers, "workers", 10, "pods created at a time")
	cmd.Flags().Float64Var(&rate, "rate", 5, "pods created per second (0: as fast as --workers allow); startup latency as the SLO means it needs a rate the node sustains")
	cmd.Flags().IntVar(&idlePods, "idle-pods", 20, "pods running while idle CPU is measured")
	cmd.Flags().DurationVar(&warmup, "warmup", 30*time.Second, "wait before an idle window")
	cmd.Flags().DurationVar(&window, "window", time.Minute, "idle window")
	cf.add(cmd, []string{"sqlkube"})
	return cmd
}
