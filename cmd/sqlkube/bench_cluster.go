package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sqlkube/sqlkube/bench/cluster"
)

// clusterFlags are the flags every control-plane benchmark shares.
type clusterFlags struct {
	kubeBinDir string
	variants   string
	runs       int
	keep       bool
	serverBin  string
	serverArgs []string
}

func (f *clusterFlags) add(cmd *cobra.Command, variants []string) {
	fl := cmd.Flags()
	fl.StringVar(&f.kubeBinDir, "kube-bin-dir", os.Getenv("SQLKUBE_TEST_KUBE_BIN_DIR"), "directory with Kubernetes' kube-controller-manager and kube-scheduler binaries (default: $SQLKUBE_TEST_KUBE_BIN_DIR)")
	fl.StringVar(&f.variants, "variants", strings.Join(variants, ","), "comma-separated variants to run, side by side in each round: "+strings.Join(variants, ", "))
	fl.IntVar(&f.runs, "runs", 3, "rounds (each runs every variant once, on a new server)")
	fl.BoolVar(&f.keep, "keep", false, "keep each run's data directory and logs")
	f.addServerFlags(fl)
}

// addServerFlags adds the flags of the server each run starts.
func (f *clusterFlags) addServerFlags(fl *pflag.FlagSet) {
	fl.StringVar(&f.serverBin, "server-bin", "", "the sqlkube binary each run's server runs from (default: this one), e.g. another release's, to compare them under the same bench")
	fl.StringArrayVar(&f.serverArgs, "server-arg", nil, "an extra flag for every run's sqlkube server, e.g. --server-arg=--pprof-address=127.0.0.1:6060 (repeatable)")
}

func (f *clusterFlags) setup() (cluster.Setup, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return cluster.Setup{}, nil, err
	}
	variants := strings.Split(f.variants, ",")
	for _, v := range variants {
		if strings.HasPrefix(v, "upstream") || strings.HasPrefix(v, "kube-") {
			if err := cluster.KubeBinaries(f.kubeBinDir, "kube-controller-manager", "kube-scheduler"); err != nil {
				return cluster.Setup{}, nil, fmt.Errorf("variant %s: %w", v, err)
			}
			break
		}
	}
	if f.serverBin != "" {
		self = f.serverBin
	}
	return cluster.Setup{Sqlkube: self, KubeBinDir: f.kubeBinDir, Keep: f.keep, ServerArgs: f.serverArgs}, variants, nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func newBenchDeploymentCommand(lf *logFlags) *cobra.Command {
	var (
		cf              clusterFlags
		nodes, replicas int
		timeout         time.Duration
		profile         string
		profileSeconds  int
	)
	cmd := &cobra.Command{
		Use:   "deployment",
		Short: "Time a Deployment's pods from create to Running and from delete to gone, on simulated nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := stderrLogger(lf); err != nil {
				return err
			}
			setup, variants, err := cf.setup()
			if err != nil {
				return err
			}
			setup.ServerCPUProfile, setup.ProfileSeconds = profile, profileSeconds
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "deployment of %d replicas on %d simulated nodes; load average %s\n", replicas, nodes, loadAverage())
			results := map[string][][3]time.Duration{}
			for round := 1; round <= cf.runs; round++ {
				for _, v := range variants {
					ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
					r, err := setup.RunDeploymentVariant(ctx, v, nodes, replicas)
					cancel()
					if err != nil {
						fmt.Fprintf(out, "round %d\t%s\tfailed: %v\n", round, v, err)
						continue
					}
					results[v] = append(results[v], [3]time.Duration{r.Running, r.Gone, r.ServerCPU})
					fmt.Fprintf(out, "round %d\t%s\tto Running %v\tto gone %v\tserver CPU to Running %v\tload %s\n", round, v, r.Running.Round(time.Millisecond), r.Gone.Round(time.Millisecond), r.ServerCPU, loadAverage())
				}
			}
			for _, v := range variants {
				rs := results[v]
				fmt.Fprintf(out, "median\t%s\tto Running %v\tto gone %v\tserver CPU to Running %v\t(%d runs)\n", v, median(rs, 0), median(rs, 1), median(rs, 2), len(rs))
			}
			return nil
		},
	}
	cf.add(cmd, cluster.DeploymentVariants)
	cmd.Flags().IntVar(&nodes, "nodes", 100, "simulated nodes")
	cmd.Flags().IntVar(&replicas, "replicas", 1000, "the Deployment's replicas")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "limit of each run")
	cmd.Flags().StringVar(&profile, "server-cpuprofile", "", "take a CPU profile of each run's server from the Deployment's create, into this path with .VARIANT appended (each round overwrites the last)")
	cmd.Flags().IntVar(&profileSeconds, "profile-seconds", 3, "length of --server-cpuprofile's profile")
	return cmd
}

func median(rs [][3]time.Duration, i int) time.Duration {
	if len(rs) == 0 {
		return 0
	}
	v := make([]time.Duration, len(rs))
	for j, r := range rs {
		v[j] = r[i]
	}
	sort.Slice(v, func(a, b int) bool { return v[a] < v[b] })
	return v[len(v)/2].Round(time.Millisecond)
}

func newBenchSchedulerCommand(lf *logFlags) *cobra.Command {
	var (
		cf         clusterFlags
		o          cluster.SchedulingOptions
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Time scheduling of unbound pods onto Ready nodes (scheduler_perf's SchedulingBasic)",
		Long: `scheduler starts sqlkube server with only the API (--controllers=-*
--disable-scheduler), creates --nodes Ready Node objects and --pods unbound
pods, then starts a scheduler and samples the number of bound pods every
second (a pod informer in this process) until all are bound. Variants:
sqlkube-server (the scheduler sqlkube server runs in its own process, over
its in-memory loopback; it leads through a Lease in a namespace the bench
creates only once the pods exist, so it starts then), sqlkube (sqlkube's
scheduler package in this process, over HTTPS with the admin kubeconfig,
QPS 5000 / burst 10000 as sqlkube server runs it), sqlkube-process
(sqlkube scheduler, its own process, QPS 5000 / burst 10000), kube-scheduler (the
binary, default QPS 50 / burst 100) and kube-scheduler-qps (QPS 5000 /
burst 10000).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := stderrLogger(lf); err != nil {
				return err
			}
			setup, variants, err := cf.setup()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			shape := "SchedulingBasic"
			if o.Shape.AntiAffinityGroups > 0 {
				shape = fmt.Sprintf("required pod anti-affinity on the hostname, %d groups", o.Shape.AntiAffinityGroups)
			}
			if o.NoDefaultSpread {
				shape += "; PodTopologySpread defaultingType List, no defaultConstraints"
			}
			fmt.Fprintf(out, "scheduling %d pods on %d nodes (%s); load average %s\n", o.Pods, o.Nodes, shape, loadAverage())
			results := map[string][]cluster.SchedulingResult{}
			profiled := cpuProfile == ""
			for round := 1; round <= cf.runs; round++ {
				for _, v := range variants {
					ro := o
					if v == "sqlkube" && !profiled {
						profiled = true
						f, err := os.Create(cpuProfile)
						if err != nil {
							return err
						}
						ro.OnStart = func() { _ = pprof.StartCPUProfile(f) }
						ro.OnStop = func() { pprof.StopCPUProfile(); f.Close() }
					}
					r, err := setup.RunSchedulingVariant(cmd.Context(), v, ro)
					if err != nil {
						fmt.Fprintf(out, "round %d\t%s\tfailed: %v\n", round, v, err)
						continue
					}
					results[v] = append(results[v], r)
					printScheduling(out, fmt.Sprintf("round %d", round), v, r)
					fmt.Fprintf(out, "\t(setup %v, load %s)\n", r.Setup.Round(time.Millisecond), loadAverage())
				}
			}
			for _, v := range variants {
				rs := results[v]
				if len(rs) == 0 {
					continue
				}
				sort.Slice(rs, func(a, b int) bool { return rs[a].Average < rs[b].Average })
				printScheduling(out, "median", v, rs[len(rs)/2])
				fmt.Fprintf(out, "\t(of %d runs; by average pods/s)\n", len(rs))
			}
			return nil
		},
	}
	cf.add(cmd, cluster.SchedulerVariants)
	fl := cmd.Flags()
	fl.IntVar(&o.Nodes, "nodes", 5000, "Ready nodes (plain Node objects: 4 CPUs, 32 GiB, 110 pods)")
	fl.IntVar(&o.Pods, "pods", 10000, "unbound pods (100m CPU, 500 MiB each)")
	fl.IntVar(&o.Shape.AntiAffinityGroups, "anti-affinity-groups", 0, "give every pod a required anti-affinity to its group (pod i is in group i mod N) on the hostname (0: none)")
	fl.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "limit of the wait for every pod to be bound (then the bound pods are reported)")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process during the first sqlkube variant's scheduling")
	fl.BoolVar(&o.NoDefaultSpread, "no-default-spread", false, "run every scheduler with a --config whose PodTopologySpread has defaultingType List and no defaultConstraints (no system default spreading; such pods may be scheduled in batches)")
	return cmd
}

func printScheduling(out io.Writer, label, v string, r cluster.SchedulingResult) {
	pl := r.Placement
	fmt.Fprintf(out, "%s\t%s\tbound %d in %v (first bind at %v)\tavg %.0f pods/s\tp50/p90/p99 %.0f/%.0f/%.0f pods/s\tpods per node %d-%d on %d nodes, per zone %d-%d",
		label, v, r.Bound, r.Total.Round(time.Millisecond), r.First.Round(time.Millisecond), r.Average, r.P50, r.P90, r.P99,
		pl.MinPerNode, pl.MaxPerNode, pl.NodesUsed, pl.MinPerZone, pl.MaxPerZone)
	fmt.Fprintf(out, "\tCPU: server %.1fs, scheduler process %.1fs, bench %.1fs",
		r.ServerCPU.Seconds(), r.SchedulerCPU.Seconds(), r.BenchCPU.Seconds())
}

func newBenchIdleCommand(lf *logFlags) *cobra.Command {
	var (
		cf             clusterFlags
		nodes, windows int
		warmup, window time.Duration
	)
	cmd := &cobra.Command{
		Use:   "idle",
		Short: "Measure the CPU and resident memory of an idle sqlkube server with all controllers and simulated nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := stderrLogger(lf); err != nil {
				return err
			}
			setup, _, err := cf.setup()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "idle sqlkube server, all controllers, %d simulated nodes; load average %s\n", nodes, loadAverage())
			samples, err := setup.RunIdle(cmd.Context(), nodes, warmup, window, windows)
			for i, s := range samples {
				fmt.Fprintf(out, "window %d\tCPU %v in %v (%.2f%% of a core)\tRSS %.1f MiB (anonymous %.1f, file %.1f; Go heap in use %.1f)\n", i+1, s.CPU, s.Window.Round(time.Second), 100*s.CPU.Seconds()/s.Window.Seconds(),
					mib(s.RSS), mib(s.RSSAnon), mib(s.RSSFile), mib(s.HeapInuse))
			}
			fmt.Fprintf(out, "load average %s\n", loadAverage())
			return err
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 100, "simulated nodes")
	cmd.Flags().IntVar(&windows, "windows", 3, "consecutive measurement windows")
	cmd.Flags().DurationVar(&warmup, "warmup", 30*time.Second, "wait after the nodes are Ready before measuring")
	cmd.Flags().DurationVar(&window, "window", time.Minute, "length of a window")
	cf.variants = "sqlkube"
	cf.addServerFlags(cmd.Flags())
	return cmd
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
