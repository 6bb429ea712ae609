package controlplane

import (
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/kubernetes/pkg/capabilities"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/authz"
	"github.com/sqlkube/sqlkube/apiserver/bootstrap"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/node/fake"
)

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

// Serve serves the Kubernetes API over client until ctx ends: TLS from
// the operator's files or the generated PKI, the admin kubeconfig when the
// PKI is ours, a clean shutdown (watches end, other requests finish). It
// keeps the kubernetes service; with Components it also runs the controller
// manager, the scheduler and simulated nodes in-process.
func Serve(ctx context.Context, f *Config, client *kubernetes.Client, storageDesc string, start time.Time) error {
	log, out := f.Log, f.out()
	if f.Listener != nil {
		defer f.Listener.Close() // also when Serve fails before it serves
	}
	dnsIP, err := f.DNS.serviceIP(f.ServiceIPs)
	if err != nil {
		return err
	}
	advertise, noAdvertise, err := advertiseAddress(f)
	if err != nil {
		return err
	}
	serviceIP, _ := bootstrap.KubernetesServiceIP(f.ServiceIPs) // pods reach the API on it
	files, err := pki.Ensure(filepath.Join(f.DataDir, "tls"), pki.Options{
		Hosts: servingHosts(f, advertise, serviceIP), ClusterDomain: f.DNS.Domain,
	})
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	certFile, keyFile, clientCAFile := files.ServingCert, files.ServingKey, files.ClientCACert
	ownPKI := f.TLSCertFile == "" && f.ClientCAFile == ""
	if f.TLSCertFile != "" || f.TLSKeyFile != "" {
		if f.TLSCertFile == "" || f.TLSKeyFile == "" {
			return errors.New("--tls-cert-file and --tls-private-key-file go together")
		}
		certFile, keyFile = f.TLSCertFile, f.TLSKeyFile
	}
	if f.ClientCAFile != "" {
		clientCAFile = f.ClientCAFile
	}
	saKeyFile := f.SASigningKeyFile
	if saKeyFile == "" {
		saKeyFile = files.ServiceAccountKey
	}
	saKey, err := loadSigner(saKeyFile)
	if err != nil {
		return fmt.Errorf("--service-account-signing-key-file: %w", err)
	}
	if f.AuthorizationMode == authz.ModeAlwaysAllow {
		log.Warn().Msg("AUTHORIZATION IS OFF (--authorization-mode=AlwaysAllow): every authenticated user may do anything; for development only")
	}
	// Whether pods may run privileged containers is process-wide state
	// in Kubernetes' validation, set once, as kube-apiserver does.
	capabilities.Setup(f.AllowPrivileged, 0)
	conf := apiserver.Config{
		Client: client, Logger: log, Authenticate: true,
		ServiceClusterIPRange: f.ServiceIPs, ServiceNodePortRange: f.NodePorts,
		MaxRequestsInflight: f.MaxInflight, MaxMutatingRequestsInflight: f.MaxMutating,
		CompactionInterval: compactionInterval(f.Compaction), TokenAuthFile: f.TokenAuthFile, ServiceAccountKey: saKey, ServiceAccountIssuer: f.SAIssuer,
		AuthorizationMode: f.AuthorizationMode, DisableAnonymousAuth: f.DisableAnonymousAuth, DisableAdmissionPlugins: f.DisableAdmission,
		KubeletCAFile: files.CACert,
		// The aggregation proxy's client certificate and the CAs
		// aggregated servers are told to trust.
		ProxyClientCertFile: files.FrontProxyClientCert, ProxyClientKeyFile: files.FrontProxyClientKey,
		RequestHeaderCAFile: files.FrontProxyCACert, RequestHeaderAllowedNames: []string{pki.FrontProxyClientName},
		ClientCAFile: clientCAFile, NoMetricsEndpoint: f.NoMetrics,
		DisableRequestMetrics: f.NoMetrics, DisableAdmissionMetrics: f.NoMetrics,
		Metrics: f.Metrics, ReadyzChecks: f.ReadyzChecks,
		WatchCacheBookmarkTick: f.WatchCacheBookmarkTick,
	}
	// The in-process controller manager's and scheduler's endpoints,
	// listened on before anything starts: a port in use fails the start.
	endpoints, err := f.Components.componentEndpoints()
	if err != nil {
		return err
	}
	defer func() {
		for _, ep := range endpoints {
			ep.l.Close() // served below, or never
		}
	}()
	conf.MetricsFamilies = apiFamilies(f.Components, endpoints)
	conf.MetricsClientHosts = apiClientHosts(endpoints)
	if _, err := pki.EnsureKubeletClient(files.Dir); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	conf.KubeletClientCertFile, conf.KubeletClientKeyFile = files.KubeletClientCert(), files.KubeletClientKey()
	if f.Encryption != "" {
		if conf.Transformers, err = apiserver.LoadEncryptionConfig(ctx, f.Encryption); err != nil {
			return err
		}
	}
	if conf.Audit, err = newAuditor(f, out); err != nil {
		return err
	}
	// Where a start's time goes, for the "serving" line.
	phases := zerolog.Dict().Dur("before", time.Since(start))
	mark := time.Now()
	api, err := apiserver.New(conf)
	if err != nil {
		return err
	}
	defer api.Close()
	phases.Dur("api", time.Since(mark))
	mark = time.Now()
	if err := api.Bootstrap(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped (SIGTERM) while starting
		}
		return fmt.Errorf("bootstrap: %w", err)
	}
	phases.Dur("bootstrap", time.Since(mark))
	mark = time.Now()
	serving, err := newReloadingCert(certFile, keyFile) // renewed certificates are served at once
	if err != nil {
		return err
	}
	clientCAs, err := certutil.NewPool(clientCAFile)
	if err != nil {
		return err
	}
	l := f.Listener
	if l == nil {
		if l, err = net.Listen(listenNetwork(f.BindAddress), net.JoinHostPort(f.BindAddress, strconv.Itoa(f.SecurePort))); err != nil {
			return fmt.Errorf("listen on %s:%d: %w", f.BindAddress, f.SecurePort, err)
		}
	}
	handler := api.Handler()
	if f.WrapHandler != nil {
		handler = f.WrapHandler(handler)
	}
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			GetCertificate: serving.GetCertificate, ClientCAs: clientCAs,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
		},
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.ServeTLS(l, "", "") }()
	port := l.Addr().(*net.TCPAddr).Port
	url := localURL(f.BindAddress, port) // what clients on this host use
	bgCtx, stopBackground := context.WithCancel(ctx)
	var background sync.WaitGroup
	defer background.Wait()
	defer stopBackground()
	endpoint := advertise // nil: this server is none of the kubernetes Service's endpoints
	switch {
	case advertise == nil:
		log.Warn().Msgf("%s: pods cannot reach the API through the kubernetes Service (it has no endpoint here); give --advertise-address", noAdvertise)
		advertise = net.IPv4(127, 0, 0, 1) // cluster-info's URL, and the cluster DNS looks for the host's address again
	case !listensOn(f.BindAddress, advertise):
		log.Warn().Str("advertise", advertise.String()).Str("bind", f.BindAddress).
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
	if !f.DNS.Disable {
		background.Go(func() { runClusterDNS(bgCtx, f.DNS, dnsIP, advertise, api.Loopback(), log) })
	}
	if f.Components != nil {
		// In-process components reach the API over the loopback client.
		comps := &components{Components: f.Components, ServiceAccountKeyFile: saKeyFile, ServiceClusterIPRange: f.ServiceIPs, discovery: api.DiscoveryGeneration}
		for _, ep := range endpoints {
			if ep.resources != nil {
				comps.resourceMetrics = ep.resources
			}
		}
		if ownPKI {
			comps.Files = &files
		}
		waitComponents, err := comps.run(bgCtx, api.Loopback(), log)
		if err != nil {
			return err
		}
		background.Go(waitComponents)
		for _, ep := range endpoints {
			background.Go(func() {
				if err := ep.serve(bgCtx, api, files, servingHosts(f, advertise, nil), clientCAs, log); err != nil {
					log.Error().Err(err).Str("component", ep.name).Msg("the component's endpoint stopped")
				}
			})
		}
	}
	if f.Components != nil && f.FakeNodes > 0 {
		// Simulated nodes, over the loopback client as the controllers.
		cfg := api.Loopback()
		cfg.UserAgent = "sqlkube-fake-node"
		background.Go(func() {
			if err := RunFakeNodes(bgCtx, cfg, fake.Options{Count: f.FakeNodes}, log); err != nil {
				log.Error().Err(err).Msg("simulated nodes stopped")
			}
		})
	}
	clusterURL := "https://" + net.JoinHostPort(advertise.String(), strconv.Itoa(port))
	background.Go(func() {
		if err := ensureClusterInfo(bgCtx, api.Loopback(), clusterURL, files.CACert, files.ClientCACert); err != nil && bgCtx.Err() == nil {
			log.Warn().Err(err).Msg("could not publish kube-public/cluster-info: nodes cannot join with a bootstrap token")
		}
	})
	if f.Node != nil {
		env := NodeEnv{URL: url, Files: files, ClusterDNS: f.DNS.kubeletDNS(dnsIP), ClusterDomain: f.DNS.Domain}
		background.Go(func() {
			if err := f.Node(bgCtx, env); err != nil && bgCtx.Err() == nil {
				log.Error().Err(err).Msg("this host's node stopped")
			}
		})
	}
	// The kubeconfig is in place before the address is announced.
	kubeconfig := filepath.Join(f.DataDir, "kubeconfig")
	if ownPKI {
		kubeconfigURL := url
		if f.KubeconfigServer != "" {
			kubeconfigURL = f.KubeconfigServer
		}
		if err := WriteKubeconfig(kubeconfig, kubeconfigURL, files); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "sqlkube server: Kubernetes API on %s\n", url)
	if ownPKI {
		fmt.Fprintf(out, "Admin kubeconfig: %s\n  export KUBECONFIG=%s\n", kubeconfig, kubeconfig)
	}
	log.Info().Str("address", url).Str("listen", l.Addr().String()).Stringer("advertise", endpoint).
		Str("storage", storageDesc).Dur("startup", time.Since(start)).Dict("phases", phases.Dur("rest", time.Since(mark))).Msg("serving Kubernetes API")
	if f.Serving != nil {
		sv := Serving{URL: url, Files: files}
		if ownPKI {
			sv.Kubeconfig = kubeconfig
		}
		f.Serving(sv)
	}

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
func newAuditor(f *Config, stdout io.Writer) (*filters.Auditor, error) {
	if f.AuditLog == "" {
		if f.AuditPolicy != "" {
			return nil, errors.New("--audit-policy-file needs --audit-log-path")
		}
		return nil, nil
	}
	w := stdout
	if f.AuditLog != "-" {
		file, err := os.OpenFile(f.AuditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--audit-log-path: %w", err)
		}
		w = file
	}
	return filters.NewAuditor(filters.AuditOptions{Out: w, PolicyFile: f.AuditPolicy})
}

// WriteKubeconfig writes the admin kubeconfig (CA and client certificate
// embedded) for url, replacing an older one.
func WriteKubeconfig(path, url string, files pki.Files) error {
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
