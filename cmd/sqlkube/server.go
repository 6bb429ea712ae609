package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/storage"
)

type serverFlags struct {
	dataDir           string
	datastore         string
	bindAddress       string
	securePort        int
	etcdListenAddress string
	tlsSANs           []string
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
	fl.StringVar(&f.dataDir, "data-dir", "./sqlkube-data", "directory for the database, certificates and the admin kubeconfig")
	fl.StringVar(&f.datastore, "datastore", "", "datastore DSN (default: sqlite://DATA_DIR/state.db)")
	fl.StringVar(&f.bindAddress, "bind-address", "127.0.0.1", "address to serve the Kubernetes API on")
	fl.IntVar(&f.securePort, "secure-port", 6443, "HTTPS port of the Kubernetes API (0: any free port)")
	fl.StringVar(&f.etcdListenAddress, "etcd-listen-address", "", "also serve the etcd API here for other tools (empty: off)")
	fl.StringSliceVar(&f.tlsSANs, "tls-san", nil, "extra host names or IPs for the serving certificate")
	return cmd
}

// runServer runs `sqlkube server` until ctx ends or SIGINT/SIGTERM.
func runServer(ctx context.Context, f *serverFlags, log zerolog.Logger, out interface{ Write([]byte) (int, error) }) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()

	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("create --data-dir: %w", err)
	}
	files, err := pki.Ensure(filepath.Join(f.dataDir, "tls"), pki.Options{Hosts: append(f.tlsSANs, f.bindAddress)})
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	dsn := f.datastore
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(f.dataDir, "state.db")
	}
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: log})
	if err != nil {
		return err
	}
	defer store.Close()
	etcd := etcdshim.New(etcdshim.Options{Backend: store, Logger: log, ClusterKey: store.Describe()})
	defer etcd.Stop(5 * time.Second)
	if f.etcdListenAddress != "" {
		l, addr, err := listen(f.etcdListenAddress)
		if err != nil {
			return fmt.Errorf("listen on --etcd-listen-address %s: %w", f.etcdListenAddress, err)
		}
		go func() { _ = etcd.Serve(l) }()
		log.Info().Str("address", addr).Msg("serving etcd API")
	}
	client := storage.Local(etcd)
	defer client.Close()

	api, err := apiserver.New(apiserver.Config{Client: client, Logger: log, Authenticate: true})
	if err != nil {
		return err
	}
	defer api.Close()
	if err := api.Bootstrap(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}

	serving, err := tls.LoadX509KeyPair(files.ServingCert, files.ServingKey)
	if err != nil {
		return err
	}
	clientCAs, err := certutil.NewPool(files.ClientCACert)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(f.bindAddress, strconv.Itoa(f.securePort)))
	if err != nil {
		return fmt.Errorf("listen on %s:%d: %w", f.bindAddress, f.securePort, err)
	}
	hs := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{serving}, ClientCAs: clientCAs,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
		},
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.ServeTLS(l, "", "") }()
	url := "https://" + l.Addr().String()

	kubeconfig := filepath.Join(f.dataDir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, url, files); err != nil {
		return err
	}
	fmt.Fprintf(out, "sqlkube server: Kubernetes API on %s\nAdmin kubeconfig: %s\n  export KUBECONFIG=%s\n", url, kubeconfig, kubeconfig)
	log.Info().Str("address", url).Str("datastore", store.Describe()).Dur("startup", time.Since(start)).Msg("serving Kubernetes API")

	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
	case err := <-serveErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	api.StopWatches() // watches end; other requests finish below
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Msg("requests still running at shutdown")
	}
	log.Info().Msg("stopped")
	return nil
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
