package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/loadgen"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

func newBenchCommand(lf *logFlags) *cobra.Command {
	var (
		cfg       loadgen.Config
		endpoints string
		datastore string
		workloads string
		label     string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure an etcd endpoint with the request shapes kube-apiserver sends",
		Long: `bench drives an etcd v3 endpoint (sqlkube's, kine's or etcd's own) with
create (txn if absent), update (get + txn compare-and-swap), get, list (prefix
range, limit 500) and watch-latency workloads, and prints ops/s and p50/p99
latency. Without --endpoints it starts sqlkube's etcd API in-process on
--datastore (default: a new SQLite file in a temporary directory).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if endpoints == "" {
				addr, stop, err := startInProcess(ctx, datastore, log)
				if err != nil {
					return err
				}
				defer stop()
				endpoints = addr
				if label == "" {
					label = "sqlkube (in-process)"
				}
			}
			cfg.Endpoints = strings.Split(endpoints, ",")
			var wl []string
			if workloads != "" {
				wl = strings.Split(workloads, ",")
			}
			if label == "" {
				label = endpoints
			}
			results, err := loadgen.Run(ctx, cfg, wl)
			for _, r := range results {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", label, r)
			}
			return err
		},
	}
	cmd.AddCommand(newBenchFakeNodesCommand())
	cmd.AddCommand(newBenchDeploymentCommand(lf), newBenchSchedulerCommand(lf), newBenchIdleCommand(lf))
	cmd.AddCommand(newBenchNodeCommand(lf), newBenchHTTPCommand(), newBenchChurnCommand())
	cmd.AddCommand(newBenchControlPlaneCommand(), newBenchTenantsCommand(lf))
	fl := cmd.Flags()
	fl.StringVar(&endpoints, "endpoints", "", "comma-separated etcd endpoints (empty: an in-process sqlkube)")
	fl.StringVar(&datastore, "datastore", "", "datastore of the in-process sqlkube (default: SQLite in a temporary directory)")
	fl.StringVar(&workloads, "workloads", "", "comma-separated workloads: "+strings.Join(loadgen.Workloads, ",")+" (default: all)")
	fl.StringVar(&label, "label", "", "name printed beside each result")
	fl.IntVar(&cfg.Clients, "clients", 4, "gRPC connections")
	fl.IntVar(&cfg.Concurrency, "concurrency", 32, "requests in flight")
	fl.DurationVar(&cfg.Duration, "duration", 5*time.Second, "duration of each workload")
	fl.IntVar(&cfg.ValueSize, "value-size", 1024, "value size in bytes")
	fl.IntVar(&cfg.Keys, "keys", 2000, "keys seeded for update/get/list")
	fl.StringVar(&cfg.Prefix, "prefix", "", "key prefix (default: /registry/loadgen/<time>/); seeded keys are PREFIX+seed/%08d")
	fl.BoolVar(&cfg.KeepKeys, "keep-keys", false, "leave the keys written in place at the end (default: delete them)")
	fl.StringSliceVar(&cfg.WatchEndpoints, "watch-endpoints", nil, "where the watch workload watches (default: --endpoints), e.g. a second server on the same database")
	return cmd
}

func newBenchChurnCommand() *cobra.Command {
	var (
		cfg       loadgen.ChurnConfig
		endpoints string
	)
	cmd := &cobra.Command{
		Use:   "churn",
		Short: "Creates, updates and deletes against an etcd endpoint for a long time, reported per interval",
		Long: `churn runs kube-apiserver's write shapes (Txns conditioned on the key's mod
revision) over a bounded key space: each worker owns --keys/--concurrency key
slots, creates the empty ones and updates (two times in three) or deletes the
live ones, so about three quarters of the keys are live at any time and the
database holds a steady amount of current data while history grows until the
server compacts it. After every --interval it prints throughput, p50/p99
latency, the operations by kind, and the revision and database size the
endpoint's Status reports. Run the server with automatic compaction on (for
sqlkube etcd, --compaction-interval, default 5m).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Endpoints = strings.Split(endpoints, ",")
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			out := cmd.OutOrStdout()
			return loadgen.Churn(ctx, cfg, func(r loadgen.ChurnInterval) { fmt.Fprintln(out, r) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&endpoints, "endpoints", "", "comma-separated etcd endpoints (required)")
	_ = cmd.MarkFlagRequired("endpoints")
	fl.IntVar(&cfg.Clients, "clients", 4, "gRPC connections")
	fl.IntVar(&cfg.Concurrency, "concurrency", 32, "requests in flight")
	fl.DurationVar(&cfg.Duration, "duration", 30*time.Minute, "length of the run")
	fl.DurationVar(&cfg.Interval, "interval", time.Minute, "reporting interval")
	fl.IntVar(&cfg.ValueSize, "value-size", 1024, "value size in bytes")
	fl.IntVar(&cfg.Keys, "keys", 10000, "key slots (about three quarters live at a time)")
	fl.StringVar(&cfg.Prefix, "prefix", "", "key prefix (default: /registry/churn/<time>/)")
	return cmd
}

// startInProcess serves sqlkube's etcd API on a loopback port.
func startInProcess(ctx context.Context, dsn string, log zerolog.Logger) (string, func(), error) {
	var tmp string
	if dsn == "" {
		var err error
		tmp, err = os.MkdirTemp("", "sqlkube-bench-")
		if err != nil {
			return "", nil, err
		}
		dsn = "sqlite://" + filepath.Join(tmp, "state.db")
	}
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: log})
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		store.Close()
		return "", nil, err
	}
	srv := etcdshim.New(etcdshim.Options{Backend: store, Logger: log})
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), func() {
		srv.Stop(5 * time.Second)
		store.Close()
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}, nil
}
