package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/node/images/ociregistry"
)

// newRegistryCommand is `sqlkube registry serve`, a test aid (hidden):
// image archives served as a registry, which nodes without one pull from
// through a --registry-config-dir that names it as a mirror. The
// conformance harness and the real-node tests use it.
func newRegistryCommand(lf *logFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "registry",
		Short:  "A read-only registry of image archives, for tests on machines without a registry",
		Hidden: true,
	}
	cmd.AddCommand(newRegistryServeCommand(lf))
	return cmd
}

func newRegistryServeCommand(lf *logFlags) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] ARCHIVE...",
		Short: "Serve image archives (OCI image layouts in tar files) over the OCI distribution API, read-only, on plain HTTP",
		Long: `serve answers the registry API's pulls (GET and HEAD on /v2/, manifests by tag or digest,
blobs, tags/list) with the images of the archives given, under the names their index.json
gives them (sqlkube images import's archives; the conformance images), until SIGTERM.
It prints "sqlkube registry: serving N images on http://ADDR" once it listens (--listen
HOST:0 takes a free port), and logs every request on standard error.

A node pulls from it through its registry hosts directory (--registry-config-dir DIR), with
DIR/registry.k8s.io/hosts.toml:

  server = "http://ADDR"
  capabilities = ["pull", "resolve"]

It is a test aid: no TLS, no authentication, no push.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := lf.logger(os.Stderr)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return serveRegistry(ctx, listen, args, log, func(addr string, n int) {
				fmt.Fprintf(cmd.OutOrStdout(), "sqlkube registry: serving %d images on http://%s\n", n, addr)
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:5000", "address to serve on, HOST:PORT (port 0: a free one, printed)")
	return cmd
}

// serveRegistry serves the archives on listen until ctx ends; ready is
// called with the address once it listens.
func serveRegistry(ctx context.Context, listen string, archives []string, log zerolog.Logger, ready func(addr string, images int)) error {
	reg, err := ociregistry.Open(archives...)
	if err != nil {
		return err
	}
	defer reg.Close()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: logRequests(reg, log), ReadHeaderTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	images := reg.Images()
	for _, img := range images {
		log.Debug().Str("image", img).Msg("serving")
	}
	log.Info().Str("address", l.Addr().String()).Int("images", len(images)).Int("archives", len(archives)).Msg("registry serving")
	ready(l.Addr().String(), len(images))
	err = srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// statusWriter remembers a response's status and length.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// logRequests logs each request h answers: method, path, the mirror's ns,
// status, bytes sent and time taken.
func logRequests(h http.Handler, log zerolog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		log.Info().Str("method", r.Method).Str("path", r.URL.Path).Str("ns", r.URL.Query().Get("ns")).
			Int("status", sw.status).Int64("bytes", sw.bytes).Dur("took", time.Since(start)).Str("remote", r.RemoteAddr).Msg("request")
	})
}
