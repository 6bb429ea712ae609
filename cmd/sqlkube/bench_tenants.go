package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/bench/cluster"
	"github.com/sqlkube/sqlkube/bench/tenants"
)

func newBenchTenantsCommand(lf *logFlags) *cobra.Command {
	var (
		o       tenants.Options
		rounds  int
		servers int
	)
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Many clusters on one PostgreSQL: a `sqlkube host` with --tenants tenants, idle, suspended and woken; and one `sqlkube server` per cluster for comparison",
		Long: "Runs this binary as `sqlkube host` with its tenants in a new database on --datastore's PostgreSQL server,\n" +
			"creates --tenants tenants one after another (create until Ready, then a list through each tenant's own\n" +
			"kubeconfig), leaves them idle for --settle and then --idle, measuring the host's CPU and RSS and the\n" +
			"database's transactions and connections, and suspends and wakes --wakes of them. --rounds rounds; the\n" +
			"table gives medians. With --servers N it then starts `sqlkube server`s, each on a database of its own,\n" +
			"until N serve or one does not, and measures them the same way. Everything it makes in PostgreSQL\n" +
			"(databases, tenants' roles) is dropped afterwards.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			if o.Binary == "" {
				if o.Binary, err = os.Executable(); err != nil {
					return err
				}
			}
			o.Logf = func(format string, args ...any) { log.Info().Msgf(format, args...) }
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "sqlkube bench tenants: %d tenants, %d round(s), idle %v; load average %s\n", o.Tenants, rounds, o.Idle, loadAverage())
			var runs []tenants.Result
			for r := range rounds {
				res, err := tenants.RunHost(cmd.Context(), o)
				if err != nil {
					return fmt.Errorf("round %d: %w", r+1, err)
				}
				fmt.Fprintf(out, "round %d: %s; load average %s\n", r+1, hostLine(res), loadAverage())
				runs = append(runs, res)
			}
			var srv *tenants.Result
			if servers > 0 {
				so := o
				so.Tenants = servers
				res, err := tenants.RunServers(cmd.Context(), so)
				if err != nil {
					return fmt.Errorf("one server per cluster: %w", err)
				}
				fmt.Fprintf(out, "one server per cluster: %d served (%s); %s\n", res.Clusters, res.Failure, hostLine(res))
				srv = &res
			}
			printTenantsTable(out, o, runs, srv)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.AdminDSN, "datastore", "postgres://postgres@127.0.0.1:5432/postgres", "PostgreSQL server (as a user that may create databases and roles)")
	fl.IntVar(&o.Tenants, "tenants", 100, "tenants to create")
	fl.DurationVar(&o.Settle, "settle", 30*time.Second, "wait after the last tenant is ready before measuring")
	fl.DurationVar(&o.Idle, "idle", 10*time.Minute, "idle window")
	fl.IntVar(&o.Wakes, "wakes", 10, "tenants suspended and woken by a request")
	fl.IntVar(&o.MaxConns, "max-conns", 25, "the host's --tenant-datastore-max-conns")
	fl.IntVar(&rounds, "rounds", 3, "rounds (the table gives medians)")
	fl.IntVar(&servers, "servers", 0, "also start up to N `sqlkube server`s, one per cluster (0: not)")
	fl.StringVar(&o.Binary, "binary", "", "sqlkube binary to run (default: this one)")
	return cmd
}

func hostLine(r tenants.Result) string {
	return fmt.Sprintf("%d clusters; create→ready p50 %v p99 %v; idle CPU %.1f%% of a core; %.2f tx/s (%.3f per cluster); connections max %d; RSS %.0f MiB (%.1f MiB per cluster); wake p50 %v max %v",
		r.Clusters, cluster.Percentile(r.Ready, 0.5).Round(time.Millisecond), cluster.Percentile(r.Ready, 0.99).Round(time.Millisecond),
		100*r.CPU, r.Tx, r.TxPerCluster(), r.MaxConns, mib(r.RSS), mib(r.PerCluster()),
		cluster.Percentile(r.Wake, 0.5).Round(time.Millisecond), cluster.Percentile(r.Wake, 1).Round(time.Millisecond))
}

// printTenantsTable prints the medians of the host's rounds against the
// targets, and the one-server-per-cluster figures beside them.
func printTenantsTable(out io.Writer, o tenants.Options, runs []tenants.Result, srv *tenants.Result) {
	med := func(f func(tenants.Result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	durMed := func(f func(tenants.Result) time.Duration) string {
		return time.Duration(med(func(r tenants.Result) float64 { return float64(f(r)) })).Round(time.Millisecond).String()
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "measure\ttarget\thost, %d tenants (median of %d)", o.Tenants, len(runs))
	if srv != nil {
		fmt.Fprintf(tw, "\tone server per cluster (%d)", srv.Clusters)
	}
	fmt.Fprintln(tw)
	row := func(name, target, host, server string) {
		fmt.Fprintf(tw, "%s\t%s\t%s", name, target, host)
		if srv != nil {
			fmt.Fprintf(tw, "\t%s", server)
		}
		fmt.Fprintln(tw)
	}
	var s tenants.Result
	if srv != nil {
		s = *srv
	}
	row("clusters ready and answering", fmt.Sprint(o.Tenants), fmt.Sprintf("%.0f", med(func(r tenants.Result) float64 { return float64(r.Clusters) })), fmt.Sprint(s.Clusters))
	row("CPU idle, all (% of a core)", "≤ 20", fmt.Sprintf("%.1f", med(func(r tenants.Result) float64 { return 100 * r.CPU })), fmt.Sprintf("%.1f", 100*s.CPU))
	row("PostgreSQL connections (max seen)", "≤ 25", fmt.Sprintf("%.0f", med(func(r tenants.Result) float64 { return float64(r.MaxConns) })), fmt.Sprint(s.MaxConns))
	row("PostgreSQL tx/s per idle cluster", "≤ 0.5", fmt.Sprintf("%.3f", med(func(r tenants.Result) float64 { return r.TxPerCluster() })), fmt.Sprintf("%.3f", s.TxPerCluster()))
	row("memory per cluster (MiB)", "≤ 48", fmt.Sprintf("%.1f", med(func(r tenants.Result) float64 { return mib(r.PerCluster()) })), fmt.Sprintf("%.1f", mib(s.PerCluster())))
	row("create → ready p50", "≤ 1s", durMed(func(r tenants.Result) time.Duration { return cluster.Percentile(r.Ready, 0.5) }), cluster.Percentile(s.Ready, 0.5).Round(time.Millisecond).String())
	row("create → ready p99", "≤ 2s", durMed(func(r tenants.Result) time.Duration { return cluster.Percentile(r.Ready, 0.99) }), cluster.Percentile(s.Ready, 0.99).Round(time.Millisecond).String())
	row("suspended tenant's first request p50", "≤ 1s", durMed(func(r tenants.Result) time.Duration { return cluster.Percentile(r.Wake, 0.5) }), "-")
	row("suspended tenant's first request max", "≤ 1s", durMed(func(r tenants.Result) time.Duration { return cluster.Percentile(r.Wake, 1) }), "-")
	tw.Flush()
}
