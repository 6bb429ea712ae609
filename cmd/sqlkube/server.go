package main

import (
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/kubernetes/pkg/capabilities"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/admission"
	"github.com/sqlkube/sqlkube/apiserver/authn"
	"github.com/sqlkube/sqlkube/apiserver/authz"
	"github.com/sqlkube/sqlkube/apiserver/bootstrap"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/node/fake"
	"github.com/sqlkube/sqlkube/storage"
)

// apiFlags configure the Kubernetes API endpoint of `sqlkube server` and
// `sqlkube apiserver`.
type apiFlags struct {
	dataDir      string
	bindAddress  string
	securePort   int
	tlsSANs      []string
	tlsCertFile  string
	tlsKeyFile   string
	clientCAFile string
	serviceIPs   string
	nodePorts    string
	advertise    string
	// kubeconfigServer is the API URL written into the admin kubeconfig.
	kubeconfigServer string
	// token (or the content of tokenFile) opens the cluster identity in
	// the datastore (identity.go).
	token, tokenFile string
	// authentication and authorization
	tokenAuthFile     string
	saSigningKeyFile  string
	saIssuer          string
	authorizationMode string
	encryption        string
	maxInflight       int
	maxMutating       int
	compaction        time.Duration
	allowPrivileged   bool
	auditLog          string
	auditPolicy       string
	// admission
	disableAdmission []string
	// fakeNodes simulated nodes run in-process (`sqlkube server` only).
	fakeNodes int
	// pprofAddress serves net/http/pprof (hidden; for profiling).
	pprofAddress string
	// featureGates is --feature-gates.
	featureGates string
	// node is this host's node (`sqlkube server` only; nil: none).
	node *localNodeFlags
	// dns is the cluster DNS this server runs.
	dns dnsFlags
}

func addAPIFlags(fl *pflag.FlagSet, f *apiFlags) {
	fl.StringVar(&f.dataDir, "data-dir", "./sqlkube-data", "directory for the database, certificates and the admin kubeconfig")
	fl.StringVar(&f.bindAddress, "bind-address", defaultBindAddress, "address to serve the Kubernetes API on (0.0.0.0: every IPv4 address; ::: every address)")
	fl.IntVar(&f.securePort, "secure-port", 6443, "HTTPS port of the Kubernetes API (0: any free port)")
	fl.StringSliceVar(&f.tlsSANs, "tls-san", nil, "extra host names or IPs for the generated serving certificate")
	fl.StringVar(&f.tlsCertFile, "tls-cert-file", "", "serving certificate (default: generated under DATA_DIR/tls)")
	fl.StringVar(&f.tlsKeyFile, "tls-private-key-file", "", "serving key, with --tls-cert-file")
	fl.StringVar(&f.clientCAFile, "client-ca-file", "", "CA bundle that verifies client certificates (default: the generated client CA)")
	fl.StringVar(&f.serviceIPs, "service-cluster-ip-range", apiserver.DefaultServiceClusterIPRange, "CIDR services' cluster IPs come from")
	fl.StringVar(&f.nodePorts, "service-node-port-range", apiserver.DefaultServiceNodePortRange, "port range NodePort services' ports come from")
	fl.StringVar(&f.encryption, "encryption-provider-config", "", "EncryptionConfiguration file (apiserver.config.k8s.io/v1): how resources such as secrets are encrypted at rest")
	fl.IntVar(&f.maxInflight, "max-requests-inflight", filters.DefaultMaxRequestsInflight, "read-only requests served at once (429 beyond; watches, exec/proxy and system:masters are not counted; 0: no limit)")
	fl.IntVar(&f.maxMutating, "max-mutating-requests-inflight", filters.DefaultMaxMutatingRequestsInflight, "mutating requests served at once (429 beyond; 0: no limit)")
	fl.BoolVar(&f.allowPrivileged, "allow-privileged", true, "admit pods with privileged containers (PodSecurity admission still restricts them per namespace); true as kubeadm and k3s set kube-apiserver's flag, false refuses every privileged container")
	fl.DurationVar(&f.compaction, "etcd-compaction-interval", apiserver.DefaultCompactionInterval, "how often the history is compacted to the revision seen one interval earlier, as kube-apiserver's (continue tokens and watch resourceVersions older than one to two intervals expire); 0: off, only the datastore's --compaction-retention applies")
	fl.StringVar(&f.auditLog, "audit-log-path", "", "write the audit log (audit.k8s.io/v1 Events, JSON lines) to this file; - for stdout (empty: off)")
	fl.StringVar(&f.auditPolicy, "audit-policy-file", "", "audit.k8s.io/v1 Policy of what is logged at which level (default: every request at Metadata)")
	fl.StringVar(&f.advertise, "advertise-address", "", "IPv4 address the kubernetes service's endpoints name for this server, which pods reach it at (default: --bind-address if it is one such address, else the host's address; never a loopback one)")
	fl.StringVar(&f.kubeconfigServer, "kubeconfig-server", "", "API URL written into the admin kubeconfig (default: the address the API listens on, 127.0.0.1 when that is every address), e.g. a load balancer's or a published container port's; the serving certificate names its host")
	fl.StringVar(&f.token, "token", "", "cluster token: seals the cluster's CAs, service-account key and encryption config in the datastore, and opens them on servers that join (default: DATA_DIR/token, generated there by the first server)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the cluster token (instead of --token, which other users can see in the process list)")
	fl.StringVar(&f.tokenAuthFile, "token-auth-file", "", "CSV of static bearer tokens: token,user,uid,\"group1,group2\"")
	fl.StringVar(&f.saSigningKeyFile, "service-account-signing-key-file", "", "private key that signs service-account tokens (default: generated under DATA_DIR/tls)")
	fl.StringVar(&f.saIssuer, "service-account-issuer", authn.DefaultServiceAccountIssuer, "issuer (and default audience) of service-account tokens")
	fl.StringVar(&f.authorizationMode, "authorization-mode", authz.ModeRBAC, "RBAC, or AlwaysAllow (development only)")
	fl.StringSliceVar(&f.disableAdmission, "disable-admission-plugins", nil, fmt.Sprintf("admission plugins to turn off (all run by default, in this order: %s)", strings.Join(admission.DefaultPlugins(), ",")))
	fl.StringVar(&f.featureGates, "feature-gates", "", "Kubernetes feature gates for the API server and the in-process controllers and scheduler, as kube-apiserver's: A=true,B=false (default: Kubernetes' defaults); the node's kubelet takes its own in its configuration")
	fl.StringVar(&f.pprofAddress, "pprof-address", "", "serve net/http/pprof here (debugging)")
	_ = fl.MarkHidden("pprof-address")
	addDNSFlags(fl, &f.dns)
}

// loadSigner reads a PEM private key (RSA or ECDSA).
func loadSigner(path string) (crypto.Signer, error) {
	key, err := keyutil.PrivateKeyFromFile(path)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", path)
	}
	return signer, nil
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
	components         componentFlags
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
	fl.StringVar(&f.etcdListenAddress, "etcd-listen-address", "", "also serve the etcd API here for other tools (empty: off); off this host, over TLS with client certificates generated under DATA_DIR/tls")
	fl.IntVar(&f.api.fakeNodes, "fake-nodes", 0, "also run this many simulated nodes in-process (as `sqlkube node --fake`: fake-0 …)")
	f.api.node = &localNodeFlags{}
	addLocalNodeFlags(fl, f.api.node, true)
	fl.BoolVar(&f.etcdClientCertAuth, "etcd-client-cert-auth", false, "require TLS client certificates on --etcd-listen-address even on a loopback address or unix socket")
	return cmd
}

type apiserverFlags struct {
	api         apiFlags
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
	if f.api.fakeNodes < 0 {
		return fmt.Errorf("--fake-nodes %d: must not be negative", f.api.fakeNodes)
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
	if err := os.MkdirAll(f.api.dataDir, 0o700); err != nil {
		return fmt.Errorf("create --data-dir: %w", err)
	}
	dsn := f.datastore
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(f.api.dataDir, "state.db")
	}
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: log})
	if err != nil {
		return err
	}
	defer store.Close()
	addCommitProc(store.DialectName(), log)
	// The cluster identity comes first: the etcd API's certificates are
	// issued from the cluster CA.
	if err := establishIdentityLocal(ctx, store, &f.api, log, out); err != nil {
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
	return serveAPI(ctx, &f.api, client, store.Describe(), start, log, out, &components{flags: &f.components})
}

// runAPIServer runs `sqlkube apiserver`.
func runAPIServer(ctx context.Context, f *apiserverFlags, log zerolog.Logger, out io.Writer) error {
	if err := f.api.applyFeatureGates(); err != nil {
		return err
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	start := time.Now()
	if (f.datastore == "") == (len(f.etcdServers) == 0) {
		return errors.New("give exactly one of --datastore and --etcd-servers")
	}
	if err := os.MkdirAll(f.api.dataDir, 0o700); err != nil {
		return fmt.Errorf("create --data-dir: %w", err)
	}
	if f.datastore != "" {
		store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: f.datastore, Logger: log})
		if err != nil {
			return err
		}
		defer store.Close()
		addCommitProc(store.DialectName(), log)
		etcd := etcdshim.New(etcdshim.Options{Backend: store, Logger: log, ClusterKey: store.Describe()})
		defer etcd.Stop(5 * time.Second)
		client := storage.Local(etcd)
		defer client.Close()
		if err := establishIdentity(ctx, client.KV, &f.api, log, out); err != nil {
			return err
		}
		return serveAPI(ctx, &f.api, client, store.Describe(), start, log, out, nil)
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
	if err := establishIdentity(ctx, client.KV, &f.api, log, out); err != nil {
		return err
	}
	return serveAPI(ctx, &f.api, client, strings.Join(f.etcdServers, ","), start, log, out, nil)
}

// serveAPI serves the Kubernetes API over client until ctx ends: TLS from
// the operator's files or the generated PKI, the admin kubeconfig when the
// PKI is ours, a clean shutdown (watches end, other requests finish). It
// keeps the kubernetes service; with comps (`sqlkube server`) it also runs
// the controller manager and the scheduler in-process.
func serveAPI(ctx context.Context, f *apiFlags, client *kubernetes.Client, storageDesc string, start time.Time, log zerolog.Logger, out io.Writer, comps *components) error {
	if f.pprofAddress != "" {
		stopPprof, err := servePprof(f.pprofAddress)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	dnsIP, err := f.dns.serviceIP(f.serviceIPs)
	if err != nil {
		return err
	}
	advertise, noAdvertise, err := advertiseAddress(f)
	if err != nil {
		return err
	}
	serviceIP, _ := bootstrap.KubernetesServiceIP(f.serviceIPs) // pods reach the API on it
	files, err := pki.Ensure(filepath.Join(f.dataDir, "tls"), pki.Options{
		Hosts: servingHosts(f, advertise, serviceIP), ClusterDomain: f.dns.domain,
	})
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	certFile, keyFile, clientCAFile := files.ServingCert, files.ServingKey, files.ClientCACert
	ownPKI := f.tlsCertFile == "" && f.clientCAFile == ""
	if f.tlsCertFile != "" || f.tlsKeyFile != "" {
		if f.tlsCertFile == "" || f.tlsKeyFile == "" {
			return errors.New("--tls-cert-file and --tls-private-key-file go together")
		}
		certFile, keyFile = f.tlsCertFile, f.tlsKeyFile
	}
	if f.clientCAFile != "" {
		clientCAFile = f.clientCAFile
	}
	saKeyFile := f.saSigningKeyFile
	if saKeyFile == "" {
		saKeyFile = files.ServiceAccountKey
	}
	saKey, err := loadSigner(saKeyFile)
	if err != nil {
		return fmt.Errorf("--service-account-signing-key-file: %w", err)
	}
	if f.authorizationMode == authz.ModeAlwaysAllow {
		log.Warn().Msg("AUTHORIZATION IS OFF (--authorization-mode=AlwaysAllow): every authenticated user may do anything; for development only")
	}
	// Whether pods may run privileged containers is process-wide state
	// in Kubernetes' validation, set once, as kube-apiserver does.
	capabilities.Setup(f.allowPrivileged, 0)
	conf := apiserver.Config{
		Client: client, Logger: log, Authenticate: true,
		ServiceClusterIPRange: f.serviceIPs, ServiceNodePortRange: f.nodePorts,
		MaxRequestsInflight: f.maxInflight, MaxMutatingRequestsInflight: f.maxMutating,
		CompactionInterval: compactionInterval(f.compaction), TokenAuthFile: f.tokenAuthFile, ServiceAccountKey: saKey, ServiceAccountIssuer: f.saIssuer,
		AuthorizationMode: f.authorizationMode, DisableAdmissionPlugins: f.disableAdmission,
		KubeletCAFile: files.CACert,
		// The aggregation proxy's client certificate and the CAs
		// aggregated servers are told to trust.
		ProxyClientCertFile: files.FrontProxyClientCert, ProxyClientKeyFile: files.FrontProxyClientKey,
		RequestHeaderCAFile: files.FrontProxyCACert, RequestHeaderAllowedNames: []string{pki.FrontProxyClientName},
		ClientCAFile: clientCAFile,
	}
	if _, err := pki.EnsureKubeletClient(files.Dir); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	conf.KubeletClientCertFile, conf.KubeletClientKeyFile = files.KubeletClientCert(), files.KubeletClientKey()
	if f.encryption != "" {
		if conf.Transformers, err = apiserver.LoadEncryptionConfig(ctx, f.encryption); err != nil {
			return err
		}
	}
	if conf.Audit, err = newAuditor(f, out); err != nil {
		return err
	}
	api, err := apiserver.New(conf)
	if err != nil {
		return err
	}
	defer api.Close()
	if err := api.Bootstrap(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped (SIGTERM) while starting
		}
		return fmt.Errorf("bootstrap: %w", err)
	}
	serving, err := newReloadingCert(certFile, keyFile) // renewed certificates are served at once
	if err != nil {
		return err
	}
	clientCAs, err := certutil.NewPool(clientCAFile)
	if err != nil {
		return err
	}
	l, err := net.Listen(listenNetwork(f.bindAddress), net.JoinHostPort(f.bindAddress, strconv.Itoa(f.securePort)))
	if err != nil {
		return fmt.Errorf("listen on %s:%d: %w", f.bindAddress, f.securePort, err)
	}
	hs := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			GetCertificate: serving.GetCertificate, ClientCAs: clientCAs,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
		},
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.ServeTLS(l, "", "") }()
	port := l.Addr().(*net.TCPAddr).Port
	url := localURL(f.bindAddress, port) // what clients on this host use
	bgCtx, stopBackground := context.WithCancel(ctx)
	var background sync.WaitGroup
	defer background.Wait()
	defer stopBackground()
	endpoint := advertise // nil: this server is none of the kubernetes Service's endpoints
	switch {
	case advertise == nil:
		log.Warn().Msgf("%s: pods cannot reach the API through the kubernetes Service (it has no endpoint here); give --advertise-address", noAdvertise)
		advertise = net.IPv4(127, 0, 0, 1) // cluster-info's URL, and the cluster DNS looks for the host's address again
	case !listensOn(f.bindAddress, advertise):
		log.Warn().Str("advertise", advertise.String()).Str("bind", f.bindAddress).
			Msg("the API does not listen on its advertised address: pods cannot reach it through the kubernetes Service; give --bind-address 0.0.0.0 or the advertised address")
	}
	// The issuer's discovery document names its key set at the address
	// this server is reached at, as kube-apiserver's names its external
	// host.
	if err := api.ServeOpenIDMetadata(net.JoinHostPort(advertise.String(), strconv.Itoa(port))); err != nil {
		log.Warn().Err(err).Msg("service-account issuer discovery is not served")
	}
	background.Go(func() {
		api.RunKubernetesService(bgCtx, bootstrap.KubernetesServiceOptions{Address: endpoint, Port: port})
	})
	if !f.dns.disable {
		background.Go(func() { runClusterDNS(bgCtx, f.dns, dnsIP, advertise, api.Loopback(), log) })
	}
	if comps != nil {
		// In-process components reach the API over the loopback client.
		comps.ServiceAccountKeyFile, comps.ServiceClusterIPRange = saKeyFile, f.serviceIPs
		if ownPKI {
			comps.Files = &files
		}
		waitComponents, err := comps.run(bgCtx, api.Loopback(), log)
		if err != nil {
			return err
		}
		background.Go(waitComponents)
	}
	if comps != nil && f.fakeNodes > 0 {
		// Simulated nodes, over the loopback client as the controllers.
		cfg := api.Loopback()
		cfg.UserAgent = "sqlkube-fake-node"
		background.Go(func() {
			if err := runFakeNodes(bgCtx, cfg, fake.Options{Count: f.fakeNodes}, log); err != nil {
				log.Error().Err(err).Msg("simulated nodes stopped")
			}
		})
	}
	clusterURL := "https://" + net.JoinHostPort(advertise.String(), strconv.Itoa(port))
	background.Go(func() {
		if err := ensureClusterInfo(bgCtx, api.Loopback(), clusterURL, files.CACert); err != nil && bgCtx.Err() == nil {
			log.Warn().Err(err).Msg("could not publish kube-public/cluster-info: nodes cannot join with a bootstrap token")
		}
	})
	if f.node != nil && !f.node.disable {
		nodeURL := url
		node := *f.node
		node.clusterDNS, node.clusterDomain = f.dns.kubeletDNS(dnsIP), f.dns.domain
		background.Go(func() {
			if err := runLocalNode(bgCtx, node, f.dataDir, nodeURL, files, log); err != nil && bgCtx.Err() == nil {
				log.Error().Err(err).Msg("this host's node stopped")
			}
		})
	}
	// The kubeconfig is in place before the address is announced.
	kubeconfig := filepath.Join(f.dataDir, "kubeconfig")
	if ownPKI {
		kubeconfigURL := url
		if f.kubeconfigServer != "" {
			kubeconfigURL = f.kubeconfigServer
		}
		if err := writeKubeconfig(kubeconfig, kubeconfigURL, files); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "sqlkube server: Kubernetes API on %s\n", url)
	if ownPKI {
		fmt.Fprintf(out, "Admin kubeconfig: %s\n  export KUBECONFIG=%s\n", kubeconfig, kubeconfig)
	}
	log.Info().Str("address", url).Str("listen", l.Addr().String()).Stringer("advertise", endpoint).
		Str("storage", storageDesc).Dur("startup", time.Since(start)).Msg("serving Kubernetes API")

	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
	case err := <-serveErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	stopBackground()
	background.Wait() // controllers and the kubernetes service reconciler stop first
	api.StopWatches() // watches end; other requests finish below
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Msg("requests still running at shutdown")
	}
	log.Info().Msg("stopped")
	return nil
}

// newAuditor opens --audit-log-path (nil when it is empty). The file is
// appended to and stays open for the life of the process.
func newAuditor(f *apiFlags, stdout io.Writer) (*filters.Auditor, error) {
	if f.auditLog == "" {
		if f.auditPolicy != "" {
			return nil, errors.New("--audit-policy-file needs --audit-log-path")
		}
		return nil, nil
	}
	w := stdout
	if f.auditLog != "-" {
		file, err := os.OpenFile(f.auditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--audit-log-path: %w", err)
		}
		w = file
	}
	return filters.NewAuditor(filters.AuditOptions{Out: w, PolicyFile: f.auditPolicy})
}

// writeKubeconfig writes the admin kubeconfig (CA and client certificate
// embedded) for url, replacing an older one.
func writeKubeconfig(path, url string, files pki.Files) error {
	read := func(p string) ([]byte, error) { return os.ReadFile(p) }
	ca, err := read(files.CACert)
	if err != nil {
		return err
	}
	cert, err := read(files.AdminCert)
	if err != nil {
		return err
	}
	key, err := read(files.AdminKey)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sqlkube"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["sqlkube"] = &clientcmdapi.Context{Cluster: "sqlkube", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "sqlkube"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

// compactionInterval is --etcd-compaction-interval as apiserver.Config
// takes it: 0 there is the default, and off is negative.
func compactionInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
