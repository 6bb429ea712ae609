package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

func etcdAPIVersion() string { return etcdshim.Version }

type etcdFlags struct {
	listen              string
	datastore           string
	name                string
	advertise           string
	certFile, keyFile   string
	trustedCAFile       string
	clientCertAuth      bool
	metricsAddress      string
	compactionInterval  time.Duration
	quota               int64
	reserve             int64
	compactionRetention int64
	watchCacheSize      int
	progressInterval    time.Duration
	pprofAddress        string
}

func newEtcdCommand(lf *logFlags) *cobra.Command {
	f := &etcdFlags{}
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Serve the etcd v3 API over SQL",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			return runEtcd(cmd.Context(), f, log)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen-address", "127.0.0.1:2379", "address to serve the etcd API on (host:port or unix:///path)")
	fl.StringVar(&f.datastore, "datastore", sqlstore.DefaultDSN, "datastore DSN: sqlite:///path, postgres://user:pass@host:5432/db?sslmode=disable or mysql://user:pass@tcp(host:3306)/db")
	fl.StringVar(&f.name, "name", "", "member name (default: the host name)")
	fl.StringVar(&f.advertise, "advertise-client-urls", "", "client URLs reported by MemberList (default: from --listen-address)")
	fl.StringVar(&f.certFile, "cert-file", "", "TLS certificate for the etcd API")
	fl.StringVar(&f.keyFile, "key-file", "", "TLS private key for the etcd API")
	fl.StringVar(&f.trustedCAFile, "trusted-ca-file", "", "CA bundle that verifies client certificates")
	fl.BoolVar(&f.clientCertAuth, "client-cert-auth", false, "require client certificates signed by --trusted-ca-file")
	fl.StringVar(&f.metricsAddress, "metrics-address", "", "address to serve Prometheus /metrics on (empty: off)")
	fl.Int64Var(&f.reserve, "datastore-reserve-bytes", 0, reserveFlagHelp)
	fl.Int64Var(&f.quota, "quota-backend-bytes", 0, "the datastore's space quota in bytes, as etcd's: past it writes are refused with etcd's \"database space exceeded\" and a NOSPACE alarm is raised (etcdctl alarm list/disarm), while reads, deletes, compaction and defrag go on (0: 2 GiB, etcd's default; negative: none)")
	fl.DurationVar(&f.compactionInterval, "compaction-interval", 5*time.Minute, "how often history is compacted automatically (0: never)")
	fl.Int64Var(&f.compactionRetention, "compaction-retention", 1000, "revisions automatic compaction keeps")
	fl.IntVar(&f.watchCacheSize, "watch-cache-size", 10000, "recent events kept in memory for watchers")
	fl.DurationVar(&f.progressInterval, "watch-progress-notify-interval", 10*time.Minute, "interval of progress notifications to idle watches that ask for them")
	fl.StringVar(&f.pprofAddress, "pprof-address", "", "serve net/http/pprof here (debugging)")
	_ = fl.MarkHidden("pprof-address")
	return cmd
}

func serverTLS(f *etcdFlags) (*tls.Config, error) {
	if f.certFile == "" && f.keyFile == "" {
		if f.clientCertAuth || f.trustedCAFile != "" {
			return nil, errors.New("--client-cert-auth and --trusted-ca-file need --cert-file and --key-file")
		}
		return nil, nil
	}
	if f.certFile == "" || f.keyFile == "" {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS key pair: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if f.trustedCAFile != "" {
		pem, err := os.ReadFile(f.trustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("read --trusted-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--trusted-ca-file %s holds no PEM certificate", f.trustedCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if f.clientCertAuth {
		if f.trustedCAFile == "" {
			return nil, errors.New("--client-cert-auth needs --trusted-ca-file")
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func listen(addr string) (net.Listener, string, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		_ = os.Remove(path)
		l, err := net.Listen("unix", path)
		return l, addr, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	return l, l.Addr().String(), nil
}

func runEtcd(ctx context.Context, f *etcdFlags, log zerolog.Logger) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if f.pprofAddress != "" {
		stopPprof, err := servePprof(f.pprofAddress)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	tlsCfg, err := serverTLS(f)
	if err != nil {
		return err
	}
	if err := requireClientCerts(f.listen, tlsCfg, "--cert-file, --key-file, --trusted-ca-file and --client-cert-auth"); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	store, err := sqlstore.Open(ctx, sqlstore.Options{
		DSN: f.datastore, Logger: log, CompactionInterval: f.compactionInterval,
		CompactionRetention: f.compactionRetention, WatchCacheSize: f.watchCacheSize, Registerer: reg,
		QuotaBytes: f.quota, ReserveBytes: f.reserve,
	})
	if err != nil {
		return err
	}
	defer store.Close()
	addCommitProc(store.DialectName(), log)

	l, addr, err := listen(f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	urls := []string{scheme + "://" + addr}
	if strings.HasPrefix(f.listen, "unix://") {
		urls = []string{f.listen}
	}
	if f.advertise != "" {
		urls = strings.Split(f.advertise, ",")
	}
	name := f.name
	if name == "" {
		name, _ = os.Hostname()
	}
	srv := etcdshim.New(etcdshim.Options{
		Backend: store, Logger: log, Name: name, ClientURLs: urls, ClusterKey: store.Describe(),
		TLS: tlsCfg, ProgressNotifyInterval: f.progressInterval, Registerer: reg,
	})

	var metricsSrv *http.Server
	if f.metricsAddress != "" {
		ml, err := net.Listen("tcp", f.metricsAddress)
		if err != nil {
			l.Close()
			return fmt.Errorf("listen on --metrics-address %s: %w", f.metricsAddress, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = metricsSrv.Serve(ml) }()
		log.Info().Str("address", ml.Addr().String()).Msg("serving metrics")
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }()
	log.Info().Str("address", addr).Str("datastore", store.Describe()).Bool("tls", tlsCfg != nil).Msg("serving etcd API")

	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
	case err := <-serveErr:
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	srv.Stop(10 * time.Second)
	if metricsSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = metricsSrv.Shutdown(sctx)
		cancel()
	}
	if err := store.Close(); err != nil {
		return fmt.Errorf("close datastore: %w", err)
	}
	log.Info().Msg("stopped")
	return nil
}
