package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/server/storage"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/sqlkube/sqlkube/apiserver/openapi"
	sqlstorage "github.com/sqlkube/sqlkube/storage"
)

// Config is what an API server needs.
type Config struct {
	// Client reaches the etcd API (storage.Local or storage.Remote).
	Client *kubernetes.Client
	Logger zerolog.Logger
	// Version is reported at /version (default: the k8s.io/api version).
	Version string
	// ServiceClusterIPRange and ServiceNodePortRange are where services'
	// cluster IPs and node ports come from (defaults
	// DefaultServiceClusterIPRange, DefaultServiceNodePortRange).
	ServiceClusterIPRange, ServiceNodePortRange string
	// Authenticate requires a verified client certificate for everything
	// but /healthz, /livez, /readyz and /version (401 otherwise).
	Authenticate bool
	// Transformers encrypt the stored values of the resources they name
	// (LoadEncryptionConfig); nil: every value is stored as it is.
	Transformers value.ResourceTransformers
	// MaxRequestsInflight and MaxMutatingRequestsInflight bound the
	// read-only and mutating requests served at once (429 beyond; see
	// inflightLimiter); 0: no limit. kube-apiserver's defaults are
	// DefaultMaxRequestsInflight and DefaultMaxMutatingRequestsInflight.
	MaxRequestsInflight, MaxMutatingRequestsInflight int
	// Audit writes the audit log (NewAuditor); nil: none.
	Audit *Auditor
}

// Server serves the Kubernetes API.
type Server struct {
	cfg      Config
	echo     *echo.Echo
	registry *Registry
	storages map[*Resource]k8sstorage.Interface
	stops    []func()
	ready    []func() bool
	// stopping is closed when the server shuts down: watches end.
	stopping  chan struct{}
	stopOnce  sync.Once
	compactor sqlstorage.StoppableCompactor
	// clusterIPs and nodePorts hand out services' addresses and ports.
	clusterIPs, nodePorts *reservations
	openapi               *openapi.Builder
	// v2Proto is /openapi/v2 in protobuf, made on first request.
	v2ProtoOnce sync.Once
	v2Proto     []byte
	v2ProtoErr  error
	// fieldManagers track managedFields and serve server-side apply.
	fieldManagers *fieldManagers
}

// New builds the server and its storage (a watch cache per resource).
// Close it when done.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("apiserver: a storage client is required")
	}
	if cfg.Version == "" {
		cfg.Version = "v1.34.2"
	}
	s := &Server{cfg: cfg, registry: NewRegistry(slices.Concat(coreResources(), storageResources(), groupResources(), eventResources())...), storages: map[*Resource]k8sstorage.Interface{}, stopping: make(chan struct{})}
	if cfg.ServiceClusterIPRange == "" {
		cfg.ServiceClusterIPRange = DefaultServiceClusterIPRange
	}
	if cfg.ServiceNodePortRange == "" {
		cfg.ServiceNodePortRange = DefaultServiceNodePortRange
	}
	var err error
	if s.clusterIPs, err = newClusterIPs(cfg.Client.Client, cfg.ServiceClusterIPRange); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	if s.nodePorts, err = newNodePorts(cfg.Client.Client, cfg.ServiceNodePortRange); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.cfg = cfg
	s.compactor = sqlstorage.NewCompactor(cfg.Client, 0)
	s.stops = append(s.stops, s.compactor.Stop)
	for _, r := range s.registry.Resources() {
		st, err := s.newStorage(r)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.storages[r] = st
	}
	if s.openapi, err = s.newOpenAPI(); err != nil {
		s.Close()
		return nil, fmt.Errorf("apiserver: openapi: %w", err)
	}
	if s.fieldManagers, err = newFieldManagers(s.openapi.Definitions()); err != nil {
		s.Close()
		return nil, fmt.Errorf("apiserver: managed fields: %w", err)
	}
	s.echo = s.routes()
	return s, nil
}

// newStorage builds a resource's store (protobuf under /registry, as
// kube-apiserver stores built-in types) and its watch cache.
func (s *Server) newStorage(r *Resource) (k8sstorage.Interface, error) {
	codec, _, err := storage.NewStorageCodec(storage.StorageCodecConfig{
		StorageMediaType: runtime.ContentTypeProtobuf, StorageSerializer: Codecs,
		StorageVersion: r.GroupVersion(), MemoryVersion: r.GroupVersion(),
	})
	if r.StorageVersion != nil {
		codec, err = newViaInternalCodec(r)
	}
	if err != nil {
		return nil, fmt.Errorf("apiserver: storage codec for %s: %w", r.GroupResource(), err)
	}
	opts := sqlstorage.Options{
		Codec: codec, NewFunc: r.New, NewListFunc: r.NewList,
		ResourcePrefix: r.StoragePrefix, GroupResource: r.GroupResource(), Compactor: s.compactor,
	}
	if s.cfg.Transformers != nil {
		opts.Transformer = s.cfg.Transformers.TransformerForResource(r.GroupResource())
	}
	store, err := sqlstorage.NewStore(s.cfg.Client, opts)
	if err != nil {
		return nil, err
	}
	if c, ok := store.(interface{ Close() }); ok {
		s.stops = append(s.stops, c.Close)
	}
	cached, err := sqlstorage.NewCached(sqlstorage.CacherOptions{
		Store: store, Options: opts, GetAttrs: r.attrs, KeyFunc: r.objectKey,
	})
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, cached.Stop)
	s.ready = append(s.ready, cached.Ready)
	return cached, nil
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.echo }

// StopWatches ends every open watch (clients watch again elsewhere or
// after a restart); call it before shutting the HTTP server down, which
// waits for requests to finish.
func (s *Server) StopWatches() { s.stopOnce.Do(func() { close(s.stopping) }) }

// Close stops the watch caches and stores (open watches end).
func (s *Server) Close() {
	s.StopWatches()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.httpError
	e.Use(s.authenticate)
	if s.cfg.Audit != nil {
		e.Use(s.cfg.Audit.middleware) // rejected requests (429 below) are audited too
	}
	e.Use(newInflightLimiter(s.cfg.MaxRequestsInflight, s.cfg.MaxMutatingRequestsInflight).middleware)
	for _, p := range []string{"/healthz", "/livez"} {
		e.GET(p, func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	}
	e.GET("/readyz", s.readyz)
	// The storage layer's metrics (watch caches, fan-out, list latency by
	// source, etcd request latency); authenticated like the API.
	e.GET("/metrics", echo.WrapHandler(sqlstorage.MetricsHandler()))
	e.GET("/version", s.version)
	e.GET("/openapi/v2", s.openAPIV2)
	e.GET("/openapi/v3", s.openAPIV3Index)
	e.GET("/openapi/v3/*", s.openAPIV3Doc)
	e.GET("/api", s.apiVersions)
	e.GET("/apis", s.apiGroups)
	e.Any("/api/*", s.serveResource)
	e.Any("/apis/*", s.serveResource)
	return e
}

// ctxDone reports whether the request was abandoned.
func ctxDone(ctx context.Context) bool { return ctx.Err() != nil }
