package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/v3/kubernetes"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	certutil "k8s.io/client-go/util/cert"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/admission"
	"github.com/sqlkube/sqlkube/apiserver/authn"
	"github.com/sqlkube/sqlkube/apiserver/authz"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/controlplane"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/storage"
)

// apiFlags configure the Kubernetes API endpoint of `sqlkube server` and
// `sqlkube apiserver`: the control plane's Config, and what is the
// process's.
type apiFlags struct {
	controlplane.Config
	// pprofAddress serves net/http/pprof (hidden; for profiling).
	pprofAddress string
	// featureGates is --feature-gates.
	featureGates string
	// node is this host's node (`sqlkube server` only; nil: none).
	node *localNodeFlags
}

func addAPIFlags(fl *pflag.FlagSet, f *apiFlags) {
	fl.StringVar(&f.DataDir, "data-dir", "./sqlkube-data", "directory for the database, certificates and the admin kubeconfig")
	fl.StringVar(&f.BindAddress, "bind-address", controlplane.DefaultBindAddress, "address to serve the Kubernetes API on (0.0.0.0: every IPv4 address; ::: every address)")
	fl.IntVar(&f.SecurePort, "secure-port", 6443, "HTTPS port of the Kubernetes API (0: any free port)")
	fl.StringSliceVar(&f.TLSSANs, "tls-san", nil, "extra host names or IPs for the generated serving certificate")
	fl.StringVar(&f.TLSCertFile, "tls-cert-file", "", "serving certificate (default: generated under DATA_DIR/tls)")
	fl.StringVar(&f.TLSKeyFile, "tls-private-key-file", "", "serving key, with --tls-cert-file")
	fl.StringVar(&f.ClientCAFile, "client-ca-file", "", "CA bundle that verifies client certificates (default: the generated client CA)")
	fl.StringVar(&f.ServiceIPs, "service-cluster-ip-range", apiserver.DefaultServiceClusterIPRange, "CIDR services' cluster IPs come from")
	fl.StringVar(&f.NodePorts, "service-node-port-range", apiserver.DefaultServiceNodePortRange, "port range NodePort services' ports come from")
	fl.StringVar(&f.Encryption, "encryption-provider-config", "", "EncryptionConfiguration file (apiserver.config.k8s.io/v1): how resources such as secrets are encrypted at rest")
	fl.IntVar(&f.MaxInflight, "max-requests-inflight", filters.DefaultMaxRequestsInflight, "read-only requests served at once (429 beyond; watches, exec/proxy and system:masters are not counted; 0: no limit)")
	fl.IntVar(&f.MaxMutating, "max-mutating-requests-inflight", filters.DefaultMaxMutatingRequestsInflight, "mutating requests served at once (429 beyond; 0: no limit)")
	fl.BoolVar(&f.AllowPrivileged, "allow-privileged", true, "admit pods with privileged containers (PodSecurity admission still restricts them per namespace); true as kubeadm and k3s set kube-apiserver's flag, false refuses every privileged container")
	fl.DurationVar(&f.Compaction, "etcd-compaction-interval", apiserver.DefaultCompactionInterval, "how often the history is compacted to the revision seen one interval earlier, as kube-apiserver's (continue tokens and watch resourceVersions older than one to two intervals expire); 0: off, only the datastore's --compaction-retention applies")
	fl.StringVar(&f.AuditLog, "audit-log-path", "", "write the audit log (audit.k8s.io/v1 Events, JSON lines) to this file; - for stdout (empty: off)")
	fl.StringVar(&f.AuditPolicy, "audit-policy-file", "", "audit.k8s.io/v1 Policy of what is logged at which level (default: every request at Metadata)")
	fl.StringVar(&f.Advertise, "advertise-address", "", "IPv4 address the kubernetes service's endpoints name for this server, which pods reach it at (default: --bind-address if it is one such address, else the host's address; never a loopback one)")
	fl.StringVar(&f.KubeconfigServer, "kubeconfig-server", "", "API URL written into the admin kubeconfig (default: the address the API listens on, 127.0.0.1 when that is every address), e.g. a load balancer's or a published container port's; the serving certificate names its host")
	fl.StringVar(&f.Token, "token", "", "cluster token: seals the cluster's CAs, service-account key and encryption config in the datastore, and opens them on servers that join (default: DATA_DIR/token, generated there by the first server)")
	fl.StringVar(&f.TokenFile, "token-file", "", "file holding the cluster token (instead of --token, which other users can see in the process list)")
	fl.StringVar(&f.TokenAuthFile, "token-auth-file", "", "CSV of static bearer tokens: token,user,uid,\"group1,group2\"")
	fl.StringVar(&f.SASigningKeyFile, "service-account-signing-key-file", "", "private key that signs service-account tokens (default: generated under DATA_DIR/tls)")
	fl.StringVar(&f.SAIssuer, "service-account-issuer", authn.DefaultServiceAccountIssuer, "issuer (and default audience) of service-account tokens")
	fl.StringVar(&f.AuthorizationMode, "authorization-mode", authz.ModeRBAC, "RBAC, or AlwaysAllow (development only)")
	anon := fl.VarPF(negatedBool{&f.DisableAnonymousAuth}, "anonymous-auth", "", "let requests without credentials act as system:anonymous, which RBAC lets read /healthz, /livez, /readyz and /version only (403 elsewhere), as kube-apiserver's default; false: 401 for them but on those paths (AlwaysAllow implies false)")
	anon.NoOptDefVal = "true"
	fl.StringSliceVar(&f.DisableAdmission, "disable-admission-plugins", nil, fmt.Sprintf("admission plugins to turn off (all run by default, in this order: %s)", strings.Join(admission.DefaultPlugins(), ",")))
	fl.StringVar(&f.featureGates, "feature-gates", "", "Kubernetes feature gates for the API server and the in-process controllers and scheduler, as kube-apiserver's: A=true,B=false (default: Kubernetes' defaults); the node's kubelet takes its own in its configuration")
	fl.StringVar(&f.pprofAddress, "pprof-address", "", "serve net/http/pprof here (debugging)")
	_ = fl.MarkHidden("pprof-address")
	addDNSFlags(fl, &f.DNS)
}

// applyFeatureGates sets --feature-gates on Kubernetes' process-wide
// gates, before anything reads them.
func (f *apiFlags) applyFeatureGates() error {
	if f.featureGates == "" {
		return nil
	}
	// Tried on a copy first: a failed Set leaves the gates holding the
	// rejected value.
	if err := utilfeature.DefaultMutableFeatureGate.DeepCopy().Set(f.featureGates); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	return utilfeature.DefaultMutableFeatureGate.Set(f.featureGates)
}

type serverFlags struct {
	api                apiFlags
	quota              int64
	reserve            int64
	components         controlplane.Components
	datastore          string
	etcdListenAddress  string
	etcdClientCertAuth bool
}

func newServerCommand(lf *logFlags) *cobra.Command {
	f := &serverFlags{}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the whole control plane in one process (API server, storage, embedded SQLite)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			return runServer(cmd.Context(), f, log, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	addAPIFlags(fl, &f.api)
	addComponentFlags(fl, &f.components)
	fl.StringVar(&f.datastore, "datastore", "", "datastore DSN (default: sqlite://DATA_DIR/state.db)")
	fl.Int64Var(&f.quota, "quota-backend-bytes", 0, "the datastore's space quota in bytes, as etcd's: past it writes are refused with etcd's \"database space exceeded\" and a NOSPACE alarm is raised (etcdctl alarm list/disarm), while reads, deletes, compaction and defrag go on (0: 2 GiB, etcd's default; negative: none)")
	fl.Int64Var(&f.reserve, "datastore-reserve-bytes", 0, reserveFlagHelp)
	fl.StringVar(&f.etcdListenAddress, "etcd-listen-address", "", "also serve the etcd API here for other tools (empty: off); off this host, over TLS with client certificates generated under DATA_DIR/tls")
	fl.IntVar(&f.api.FakeNodes, "fake-nodes", 0, "also run this many simulated nodes in-process (as `sqlkube node --fake`: fake-0 …)")
	f.api.node = &localNodeFlags{}
	addLocalNodeFlags(fl, f.api.node, true)
	fl.BoolVar(&f.etcdClientCertAuth, "etcd-client-cert-auth", false, "require TLS client certificates on --etcd-listen-address even on a loopback address or unix socket")
	return cmd
}

type apiserverFlags struct {
	api         apiFlags
	quota       int64
	reserve     int64
	datastore   string
	etcdServers []string
	etcdCAFile  string
	etcdCert    string
	etcdKey     string
}

func newAPIServerCommand(lf *logFlags) *cobra.Command {
	f := &apiserverFlags{}
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Run the Kubernetes API server alone, on an etcd endpoint or straight on a shared database",
		Long: "Run the Kubernetes API server alone: on --etcd-servers (a `sqlkube etcd` or a real etcd), or with\n" +
			"--datastore on a database in-process; several may share one PostgreSQL or MySQL database.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			return runAPIServer(cmd.Context(), f, log, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	addAPIFlags(fl, &f.api)
	fl.StringVar(&f.datastore, "datastore", "", "serve storage in-process on this datastore DSN")
	fl.Int64Var(&f.quota, "quota-backend-bytes", 0, "with --datastore: "+"the datastore's space quota in bytes, as etcd's: past it writes are refused with etcd's \"database space exceeded\" and a NOSPACE alarm is raised (etcdctl alarm list/disarm), while reads, deletes, compaction and defrag go on (0: 2 GiB, etcd's default; negative: none)")
	fl.Int64Var(&f.reserve, "datastore-reserve-bytes", 0, "with --datastore: "+reserveFlagHelp)
	fl.StringSliceVar(&f.etcdServers, "etcd-servers", nil, "etcd endpoints (https://host:2379,...) to store in")
	fl.StringVar(&f.etcdCAFile, "etcd-cafile", "", "CA that verifies the etcd servers")
	fl.StringVar(&f.etcdCert, "etcd-certfile", "", "client certificate for etcd")
	fl.StringVar(&f.etcdKey, "etcd-keyfile", "", "client key for etcd")
	return cmd
}

func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
}

// runServer runs `sqlkube server` until ctx ends or SIGINT/SIGTERM.
func runServer(ctx context.Context, f *serverFlags, log zerolog.Logger, out io.Writer) error {
	if f.api.FakeNodes < 0 {
		return fmt.Errorf("--fake-nodes %d: must not be negative", f.api.FakeNodes)
	}
	if err := f.api.applyFeatureGates(); err != nil {
		return err
	}
	if n := f.api.node; n != nil && !n.disable {
		if err := n.checkRegistryConfigDir(); err != nil {
			return err
		}
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	start := time.Now()
	if err := os.MkdirAll(f.api.DataDir, 0o700); err != nil {
		return fmt.Errorf("create --data-dir: %w", err)
	}
	dsn := f.datastore
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(f.api.DataDir, "state.db")
	}
	storeMetrics := prometheus.NewRegistry()
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: log, QuotaBytes: f.quota, ReserveBytes: f.reserve, Registerer: storeMetrics})
	if err != nil {
		return err
	}
	defer store.Close()
	serveStoreHealth(&f.api.Config, store, storeMetrics)
	addCommitProc(store.DialectName(), log)
	// The cluster identity comes first: the etcd API's certificates are
	// issued from the cluster CA.
	f.api.Log, f.api.Out = log, out
	if err := controlplane.EstablishIdentityLocal(ctx, store, &f.api.Config); err != nil {
		return err
	}
	var etcdTLS *tls.Config
	var etcdFiles *pki.Files
	if f.etcdListenAddress != "" {
		if etcdTLS, etcdFiles, err = etcdServerTLS(f); err != nil {
			return err
		}
	}
	etcd := etcdshim.New(etcdshim.Options{Backend: store, Logger: log, ClusterKey: store.Describe(), TLS: etcdTLS})
	defer etcd.Stop(5 * time.Second)
	if f.etcdListenAddress != "" {
		l, addr, err := listen(f.etcdListenAddress)
		if err != nil {
			return fmt.Errorf("listen on --etcd-listen-address %s: %w", f.etcdListenAddress, err)
		}
		go func() { _ = etcd.Serve(l) }()
		ev := log.Info().Str("address", addr).Bool("tls", etcdTLS != nil)
		if etcdFiles != nil {
			ev = ev.Str("cacert", etcdFiles.CACert).Str("cert", etcdFiles.EtcdClientCert).Str("key", etcdFiles.EtcdClientKey)
		}
		ev.Msg("serving etcd API")
	}
	client := storage.Local(etcd)
	defer client.Close()
	f.components.Endpoints = true // 10257 and 10259, as upstream's components
	f.api.Components = &f.components
	return serveAPI(ctx, &f.api, client, store.Describe(), start)
}

// runAPIServer runs `sqlkube apiserver`.
func runAPIServer(ctx context.Context, f *apiserverFlags, log zerolog.Logger, out io.Writer) error {
	if err := f.api.applyFeatureGates(); err != nil {
		return err
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	start := time.Now()
	f.api.Log, f.api.Out = log, out
	if (f.datastore == "") == (len(f.etcdServers) == 0) {
		return errors.New("give exactly one of --datastore and --etcd-servers")
	}
	if err := os.MkdirAll(f.api.DataDir, 0o700); err != nil {
		return fmt.Errorf("create --data-dir: %w", err)
	}
	if f.datastore != "" {
		storeMetrics := prometheus.NewRegistry()
		store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: f.datastore, Logger: log, QuotaBytes: f.quota, ReserveBytes: f.reserve, Registerer: storeMetrics})
		if err != nil {
			return err
		}
		defer store.Close()
		serveStoreHealth(&f.api.Config, store, storeMetrics)
		addCommitProc(store.DialectName(), log)
		etcd := etcdshim.New(etcdshim.Options{Backend: store, Logger: log, ClusterKey: store.Describe()})
		defer etcd.Stop(5 * time.Second)
		client := storage.Local(etcd)
		defer client.Close()
		if err := controlplane.EstablishIdentity(ctx, client.KV, &f.api.Config); err != nil {
			return err
		}
		return serveAPI(ctx, &f.api, client, store.Describe(), start)
	}
	var tlsCfg *tls.Config
	if f.etcdCAFile != "" || f.etcdCert != "" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if f.etcdCAFile != "" {
			pool, err := certutil.NewPool(f.etcdCAFile)
			if err != nil {
				return fmt.Errorf("--etcd-cafile: %w", err)
			}
			tlsCfg.RootCAs = pool
		}
		if f.etcdCert != "" {
			pair, err := tls.LoadX509KeyPair(f.etcdCert, f.etcdKey)
			if err != nil {
				return fmt.Errorf("--etcd-certfile/--etcd-keyfile: %w", err)
			}
			tlsCfg.Certificates = []tls.Certificate{pair}
		}
	}
	client, err := storage.Remote(storage.RemoteConfig{Endpoints: f.etcdServers, TLS: tlsCfg})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := controlplane.EstablishIdentity(ctx, client.KV, &f.api.Config); err != nil {
		return err
	}
	return serveAPI(ctx, &f.api, client, strings.Join(f.etcdServers, ","), start)
}

// reserveFlagHelp is --datastore-reserve-bytes'.
const reserveFlagHelp = "SQLite only: bytes kept in reserve in a file beside the database (state.db-reserve) and given back when the disk fills, so that deletes and compaction still succeed while writes that grow the store are refused (503, Retry-After) and /readyz's datastore-disk check fails; the reserve is made again and writes resume by themselves once there is space (0: 64 MiB, or a 16th of the file system if less; negative: none)"

// serveStoreHealth has the API serve the in-process datastore's health:
// its metrics (sqlkube_store_*, sqlkube_sql_*, from reg) on /metrics,
// and /readyz's datastore-disk check, failing while the disk under the
// store is full.
func serveStoreHealth(c *controlplane.Config, store *sqlstore.Store, reg prometheus.Gatherer) {
	c.Metrics = reg
	c.ReadyzChecks = append(c.ReadyzChecks, apiserver.ReadyzCheck{Name: "datastore-disk", Check: store.CheckDiskSpace})
}

// serveAPI serves the control plane of f (controlplane.Serve) with what
// is the process's: pprof, and this host's node.
func serveAPI(ctx context.Context, f *apiFlags, client *kubernetes.Client, storageDesc string, start time.Time) error {
	if f.pprofAddress != "" {
		stopPprof, err := servePprof(f.pprofAddress)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	if n := f.node; n != nil && !n.disable {
		f.Node = func(ctx context.Context, env controlplane.NodeEnv) error {
			node := *n
			node.clusterDNS, node.clusterDomain = env.ClusterDNS, env.ClusterDomain
			return runLocalNode(ctx, node, f.DataDir, env.URL, env.Files, f.Log)
		}
	}
	return controlplane.Serve(ctx, &f.Config, client, storageDesc, start)
}

// negatedBool is a boolean flag stored negated, so that the zero value of
// the field it sets is the flag's default, true.
type negatedBool struct{ v *bool }

func (b negatedBool) String() string {
	if b.v == nil {
		return "true"
	}
	return strconv.FormatBool(!*b.v)
}

func (b negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.v = !v
	return nil
}

func (negatedBool) Type() string { return "bool" }
