package apiserver

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/client/v3/kubernetes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/storage"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/sqlkube/sqlkube/apiserver/admission"
	"github.com/sqlkube/sqlkube/apiserver/aggregator"
	"github.com/sqlkube/sqlkube/apiserver/allocator"
	"github.com/sqlkube/sqlkube/apiserver/authn"
	"github.com/sqlkube/sqlkube/apiserver/authz"
	"github.com/sqlkube/sqlkube/apiserver/bootstrap"
	"github.com/sqlkube/sqlkube/apiserver/discovery"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/loopback"
	"github.com/sqlkube/sqlkube/apiserver/openapi"
	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	"github.com/sqlkube/sqlkube/apiserver/subresources"
	sqlstorage "github.com/sqlkube/sqlkube/storage"
)

// Defaults of the service address ranges (kubeadm's cluster IP range, the
// Kubernetes node port range).
const (
	DefaultServiceClusterIPRange = "10.96.0.0/12"
	DefaultServiceNodePortRange  = "30000-32767"
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
	// Authenticate requires credentials (a verified client certificate,
	// a static, service-account or bootstrap token) for everything but
	// /healthz, /livez, /readyz and /version (401 otherwise). Without it,
	// requests without credentials act as a member of system:masters
	// (tests, or behind a proxy that authenticates).
	Authenticate bool
	// DisableAnonymousAuth refuses requests without credentials (401)
	// but to /healthz, /livez, /readyz, /version and kube-public's
	// cluster-info, as kube-apiserver's --anonymous-auth=false. By
	// default they act as system:anonymous (group
	// system:unauthenticated) and authorization decides, as
	// kube-apiserver's default: RBAC's bootstrap policy lets them read
	// only those paths (403 elsewhere). AlwaysAllow implies it, as
	// kube-apiserver turns anonymous requests off with AlwaysAllow.
	DisableAnonymousAuth bool
	// TokenAuthFile is a CSV of static bearer tokens
	// (token,user,uid,"group1,group2"), as kube-apiserver's
	// --token-auth-file.
	TokenAuthFile string
	// ServiceAccountKey signs service-account tokens (TokenRequest) and
	// its public half checks them; nil turns service-account tokens off.
	ServiceAccountKey crypto.Signer
	// ServiceAccountIssuer is the tokens' issuer and default audience
	// (default DefaultServiceAccountIssuer).
	ServiceAccountIssuer string
	// ServiceAccountTokenCacheTTL is how long a checked service-account
	// token is trusted without reading its account again (0: 10 s, as
	// kube-apiserver; negative: never).
	ServiceAccountTokenCacheTTL time.Duration
	// AuthorizationMode is authz.ModeRBAC (default) or
	// authz.ModeAlwaysAllow.
	AuthorizationMode string
	// Transformers encrypt the stored values of the resources they name
	// (LoadEncryptionConfig); nil: every value is stored as it is.
	Transformers value.ResourceTransformers
	// MaxRequestsInflight and MaxMutatingRequestsInflight bound the
	// read-only and mutating requests served at once (429 beyond; see
	// filters.InflightLimiter); 0: no limit. kube-apiserver's defaults are
	// DefaultMaxRequestsInflight and DefaultMaxMutatingRequestsInflight.
	MaxRequestsInflight, MaxMutatingRequestsInflight int
	// Audit writes the audit log (NewAuditor); nil: none.
	Audit *filters.Auditor
	// DisableAdmissionPlugins turns off some of DefaultAdmissionPlugins
	// (all run by default), as kube-apiserver's
	// --disable-admission-plugins.
	DisableAdmissionPlugins []string
	// KubeletClientCertFile and KubeletClientKeyFile are the server's
	// client certificate towards kubelets (logs, exec, port-forward,
	// node proxy); KubeletCAFile verifies the kubelets' serving
	// certificates (empty: they are not verified, as kube-apiserver's
	// without --kubelet-certificate-authority).
	KubeletClientCertFile, KubeletClientKeyFile, KubeletCAFile string
	// ClusterDial, when set, is how the server connects to the cluster's
	// pods and nodes (the proxy subresources, and kubelets for logs,
	// exec, attach and port-forward), as kube-apiserver's egress selector
	// for the "cluster" network does; nil dials them directly. Pods (and
	// nodes' other ports) are reached by IP, their TLS not verified, as
	// kube-apiserver's proxy transport.
	ClusterDial func(ctx context.Context, network, address string) (net.Conn, error)
	// ProxyClientCertFile and ProxyClientKeyFile are the client
	// certificate the aggregation proxy presents to aggregated API
	// servers (kube-apiserver's --proxy-client-cert-file and
	// --proxy-client-key-file; reloaded when they change); empty: none.
	ProxyClientCertFile, ProxyClientKeyFile string
	// RequestHeaderCAFile signed the proxy's client certificate, whose
	// common name is one of RequestHeaderAllowedNames; ClientCAFile signs
	// users' client certificates. They are published in
	// kube-system/extension-apiserver-authentication, where aggregated
	// servers learn whom to trust (aggregator/trust.go); empty: not
	// published.
	RequestHeaderCAFile, ClientCAFile string
	RequestHeaderAllowedNames         []string
	// CompactionInterval is how often Kubernetes' compactor compacts the
	// history to the revision it saw one interval earlier, as
	// kube-apiserver's --etcd-compaction-interval: a list's continue token
	// and a watch's resourceVersion stay usable for one to two intervals
	// (0: DefaultCompactionInterval; negative: off, history goes only by
	// the datastore's own retention).
	CompactionInterval time.Duration
	// DisableRequestMetrics turns the request metrics off
	// (filters.RequestMetrics: apiserver_request_*, response sizes,
	// long-running requests, deprecated APIs), and DisableAdmissionMetrics
	// the admission metrics (each plugin's and each step's latency): for
	// a server whose figures would land in another's process-wide series
	// (a host's tenant) and for benchmarks that measure their cost.
	DisableRequestMetrics, DisableAdmissionMetrics bool
	// NoMetricsEndpoint leaves /metrics unserved: the process's metrics
	// are every API server's in it, which one of a host's tenants must
	// not see. Such a server neither polls its resources' object counts
	// nor adds its datastore to apiserver_storage_size_bytes: both are
	// process-wide series, where its figures would stand for the
	// process's server that serves /metrics.
	NoMetricsEndpoint bool
	// MetricsFamilies chooses the metric families /metrics serves (nil:
	// the API server's, APIServerOwns).
	MetricsFamilies func(family string) bool
	// MetricsClientHosts chooses, of client-go's rest_client_* families,
	// the series /metrics serves by their host label (nil: all): those of
	// the in-process components whose endpoints serve them are left out.
	MetricsClientHosts func(host string) bool
	// Metrics, if set, is served whole on /metrics beside those families:
	// the registry of the datastore the server runs in its own process
	// (sqlkube server, sqlkube apiserver --datastore: sqlkube_store_*,
	// sqlkube_sql_*), which has no endpoint of its own there.
	Metrics prometheus.Gatherer
	// ReadyzChecks are checks /readyz runs after its own (ping, etcd,
	// caches): the in-process datastore's datastore-disk, say.
	ReadyzChecks []ReadyzCheck
	// WatchCacheBookmarkTick is how often each resource's watch cache
	// hands the bookmarks that are due to the few watches it serves
	// itself (sqlstorage.CacherOptions.BookmarkTick; 0: every second, as
	// upstream). Longer costs an idle server fewer wakeups, and those
	// watches their bookmarks that much later.
	WatchCacheBookmarkTick time.Duration
}

// DefaultCompactionInterval is kube-apiserver's --etcd-compaction-interval.
const DefaultCompactionInterval = 5 * time.Minute

// Server serves the Kubernetes API.
type Server struct {
	// api is what the REST handlers serve from.
	api *handlers.API
	// aggMetrics holds this server's aggregator's metrics, which its
	// /metrics serves (nil without one: component-base keeps every
	// registry for the life of the process, and a host's tenants, which
	// have no /metrics, come and go).
	aggMetrics compbasemetrics.KubeRegistry
	cfg        Config
	echo       *echo.Echo
	stops      []func()
	ready      []func() bool
	stopOnce   sync.Once
	compactor  sqlstorage.StoppableCompactor
	openapi    *openapi.Builder
	// openID is the service-account issuer's discovery document
	// (openid.go), nil until ServeOpenIDMetadata.
	openID atomic.Pointer[serviceaccount.OpenIDMetadataProvider]
	// crdDocs are the OpenAPI documents with the CRDs' merged in
	// (crd_openapi.go).
	crdDocs crdOpenAPI
	// loopback is the server's own client configuration (in-memory,
	// acting as loopback.User); informers read through it.
	loopback  *rest.Config
	informers informers.SharedInformerFactory
	authn     authenticator.Request
	// client is a clientset over loopback (nil until started), for the
	// strategies that read other objects.
	client clientset.Interface
	// tokenReviewer authenticates TokenReviews' tokens (nil without any
	// token authenticator).
	tokenReviewer authenticator.Request
	// crds serves the resources CustomResourceDefinitions define
	// (crd_controller.go).
	crds *crdController
	// aggregator proxies aggregated APIs (package aggregator); nil until
	// started, which requests over the loopback may overtake.
	aggregator atomic.Pointer[aggregator.Aggregator]
	// discovery serves the discovery documents.
	discovery *discovery.Discovery
	// converters make CRDs' conversion webhook converters
	// (customresource_conversion.go).
	converters *crdConverters
	// counts are the resources whose object counts are published
	// (observeCount).
	countsMu sync.Mutex
	counts   map[schema.GroupResource]*countObserver
}

// KubernetesVersion is the version of k8s.io/kubernetes this binary is
// built with (go.mod's), which the server reports as its own, as
// kube-apiserver of that release would.
func KubernetesVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "k8s.io/kubernetes" {
				return m.Version
			}
		}
	}
	return "v0.0.0-unknown"
}

// New builds the server and its storage (a watch cache per resource).
// Close it when done.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("apiserver: a storage client is required")
	}
	if cfg.Version == "" {
		cfg.Version = KubernetesVersion()
	}
	s := &Server{cfg: cfg, api: &handlers.API{
		Subresources: subresources.Table(), Scale: subresources.Scale,
		Storages: map[*registry.Resource]k8sstorage.Interface{}, Stopping: make(chan struct{}),
		KubeletCertFile: cfg.KubeletClientCertFile, KubeletKeyFile: cfg.KubeletClientKeyFile, KubeletCAFile: cfg.KubeletCAFile,
		ClusterDial: cfg.ClusterDial, ProxyTransport: handlers.NewProxyTransport(cfg.ClusterDial),
	}}
	if !cfg.NoMetricsEndpoint {
		s.aggMetrics = compbasemetrics.NewKubeRegistry()
	}
	s.api.Registry = registry.NewRegistry(append(registry.Builtin(running{s}), crdResource())...)
	s.api.AdmissionObjects = admission.NewObjectInterfaces(s.api.Registry.Resources())
	if cfg.ServiceClusterIPRange == "" {
		cfg.ServiceClusterIPRange = DefaultServiceClusterIPRange
	}
	if cfg.ServiceNodePortRange == "" {
		cfg.ServiceNodePortRange = DefaultServiceNodePortRange
	}
	var err error
	if s.api.ClusterIPs, err = allocator.NewClusterIPs(cfg.Client.Client, cfg.ServiceClusterIPRange); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	if s.api.NodePorts, err = allocator.NewNodePorts(cfg.Client.Client, cfg.ServiceNodePortRange); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.cfg = cfg
	compaction := cfg.CompactionInterval
	switch {
	case compaction == 0:
		compaction = DefaultCompactionInterval
	case compaction < 0:
		compaction = 0 // the compactor's "off"
	}
	s.compactor = sqlstorage.NewCompactor(cfg.Client, compaction)
	s.stops = append(s.stops, s.compactor.Stop)
	if !cfg.NoMetricsEndpoint {
		s.stops = append(s.stops, sqlstorage.MonitorStorageSize(cfg.Client))
	}
	for _, r := range s.api.Registry.Resources() {
		if r.Virtual() {
			continue // virtual: nothing stored
		}
		st, err := s.newStorage(r)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.api.Storages[r] = st
	}
	if s.openapi, err = s.newOpenAPI(); err != nil {
		s.Close()
		return nil, fmt.Errorf("apiserver: openapi: %w", err)
	}
	if s.api.FieldManagers, err = handlers.NewFieldManagers(s.openapi.Definitions()); err != nil {
		s.Close()
		return nil, fmt.Errorf("apiserver: managed fields: %w", err)
	}
	s.discovery = &discovery.Discovery{Registry: s.api.Registry, Subresources: s.api.Subresources, Version: cfg.Version, Remote: func() discovery.Remote {
		if a := s.aggregator.Load(); a != nil {
			return a
		}
		return nil
	}}
	s.echo = s.routes()
	if s.converters, err = newCRDConverters(); err != nil {
		s.Close()
		return nil, fmt.Errorf("apiserver: conversion webhooks: %w", err)
	}
	if err := s.startCRDs(); err != nil {
		s.Close()
		return nil, fmt.Errorf("apiserver: custom resources: %w", err)
	}
	if err := s.startAuth(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startAuth starts the loopback client and the informers authentication
// and authorization read from, and builds both.
func (s *Server) startAuth() error {
	var stopLoopback func()
	s.loopback, stopLoopback = loopback.Start(s.echo)
	s.stops = append(s.stops, stopLoopback)
	client, err := clientset.NewForConfig(s.loopback)
	if err != nil {
		return err
	}
	s.client = client
	s.informers = informers.NewSharedInformerFactory(client, 0)
	if s.api.Authz, err = authz.New(s.cfg.AuthorizationMode, s.informers); err != nil {
		return err
	}
	if s.api.NodeRestriction, err = handlers.NewNodeRestriction(s.informers, s.api.Authz); err != nil {
		return err
	}
	// Static and bootstrap tokens are good for the API's own audiences
	// only (TokenReviews may ask for others).
	var tokens []authenticator.Token
	if s.cfg.TokenAuthFile != "" {
		st, err := authn.LoadTokenFile(s.cfg.TokenAuthFile)
		if err != nil {
			return fmt.Errorf("apiserver: %w", err)
		}
		tokens = append(tokens, authenticator.WrapAudienceAgnosticToken(s.apiAudiences(), st))
	}
	if s.cfg.ServiceAccountKey != nil {
		if s.api.ServiceAccounts, err = authn.NewServiceAccounts(s.cfg.ServiceAccountKey, s.cfg.ServiceAccountIssuer, s.cfg.ServiceAccountTokenCacheTTL, client); err != nil {
			return fmt.Errorf("apiserver: %w", err)
		}
		tokens = append(tokens, s.api.ServiceAccounts.Tokens)
	}
	if s.cfg.Authenticate {
		bootstrap, stop, ready := authn.StartBootstrapTokens(client)
		s.stops, s.ready = append(s.stops, stop), append(s.ready, ready)
		tokens = append(tokens, authenticator.WrapAudienceAgnosticToken(s.apiAudiences(), bootstrap))
	}
	s.authn = authn.NewAuthenticator(tokens...)
	s.tokenReviewer = authn.NewTokenReviewer(tokens...)
	stop := make(chan struct{})
	// Admission's informers are requested before the factory starts.
	if s.api.Admission, err = admission.NewChain(admission.ChainOptions{
		Client: client, Loopback: s.loopback, Informers: s.informers, Authorizer: s.api.Authz, Disabled: s.cfg.DisableAdmissionPlugins,
		NoMetrics: s.cfg.DisableAdmissionMetrics, OpenAPIGeneration: s.openAPIGeneration,
	}, stop); err != nil {
		close(stop)
		return err
	}
	agg, aggReady, aggShutdown, err := aggregator.Start(aggregator.Options{
		Loopback: s.loopback, Informers: s.informers,
		ProxyClientCertFile: s.cfg.ProxyClientCertFile, ProxyClientKeyFile: s.cfg.ProxyClientKeyFile,
		Metrics: s.aggMetrics,
	}, stop)
	if err != nil {
		close(stop)
		return err
	}
	s.aggregator.Store(agg)
	s.ready, s.stops = append(s.ready, aggReady), append(s.stops, aggShutdown)
	s.converters.services.Store(&agg.Services) // conversion webhooks behind services
	trustShutdown, err := aggregator.StartAuthenticationTrust(aggregator.TrustOptions{
		ClientCAFile: s.cfg.ClientCAFile, RequestHeaderCAFile: s.cfg.RequestHeaderCAFile,
		RequestHeaderAllowedNames: s.cfg.RequestHeaderAllowedNames, Client: s.client,
	}, stop)
	if err != nil {
		close(stop)
		return err
	}
	s.stops = append(s.stops, trustShutdown)
	s.informers.Start(stop)
	s.stops = append(s.stops, func() {
		close(stop)
		s.informers.Shutdown()
	})
	s.ready = append(s.ready, func() bool {
		for _, synced := range s.informers.WaitForCacheSync(closedChan) {
			if !synced {
				return false
			}
		}
		return true
	})
	return nil
}

// apiAudiences are the audiences the API accepts tokens for.
func (s *Server) apiAudiences() authenticator.Audiences {
	return authn.APIAudiences(s.cfg.ServiceAccountIssuer)
}

// running is what the resource table asks of the server at request time
// (Running).
type running struct{ s *Server }

func (r running) Authorizer() *authz.Authorizer         { return r.s.api.Authz }
func (r running) Client() clientset.Interface           { return r.s.client }
func (r running) TokenReviewer() authenticator.Request  { return r.s.tokenReviewer }
func (r running) APIAudiences() authenticator.Audiences { return r.s.apiAudiences() }
func (r running) Resources() []*registry.Resource       { return r.s.api.Registry.Resources() }
func (r running) ComponentStatuses(ctx context.Context) *corev1.ComponentStatusList {
	return r.s.componentStatuses(ctx)
}

// componentStatuses reports whether the storage answers a read.
func (s *Server) componentStatuses(ctx context.Context) *corev1.ComponentStatusList {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cond := corev1.ComponentCondition{Type: corev1.ComponentHealthy, Status: corev1.ConditionTrue, Message: "ok"}
	if _, err := s.cfg.Client.Client.Get(ctx, "/registry/health"); err != nil {
		cond = corev1.ComponentCondition{Type: corev1.ComponentHealthy, Status: corev1.ConditionFalse, Error: err.Error()}
	}
	return &corev1.ComponentStatusList{Items: []corev1.ComponentStatus{{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-0"}, Conditions: []corev1.ComponentCondition{cond},
	}}}
}

// closedChan makes WaitForCacheSync answer at once.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Loopback returns a client configuration that reaches this server in
// memory, acting as loopback.User (system:masters), for built-in
// components running in the same process.
func (s *Server) Loopback() *rest.Config { return rest.CopyConfig(s.loopback) }

// DiscoveryGeneration changes whenever what discovery serves may have; ok
// is false while it cannot tell (discovery.Discovery.Generation).
func (s *Server) DiscoveryGeneration() (generation uint64, ok bool) { return s.discovery.Generation() }

// openAPIGeneration changes whenever the /openapi/v3 index may have (a
// CRD's documents did); ok is false while aggregated servers add paths,
// which change without notice here.
func (s *Server) openAPIGeneration() (generation uint64, ok bool) {
	if a := s.aggregator.Load(); a != nil && a.HasGroups() {
		return 0, false
	}
	return s.crdDocs.changes.Load(), true
}

// newStorage builds a resource's store (protobuf under /registry, as
// kube-apiserver stores built-in types, or JSON where it uses JSON) and
// its watch cache, stopped by Close and counted by /readyz.
func (s *Server) newStorage(r *registry.Resource) (k8sstorage.Interface, error) {
	st, stop, ready, err := s.openStorage(r)
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, stop)
	s.ready = append(s.ready, ready)
	return st, nil
}

// openStorage builds a resource's store and watch cache; the caller stops
// them (custom resources' come and go with their CRDs).
func (s *Server) openStorage(r *registry.Resource) (st k8sstorage.Interface, stop func(), ready func() bool, err error) {
	mediaType := runtime.ContentTypeProtobuf
	if r.StorageJSON {
		mediaType = runtime.ContentTypeJSON
	}
	codec, _, err := storage.NewStorageCodec(storage.StorageCodecConfig{
		StorageMediaType: mediaType, StorageSerializer: scheme.Codecs,
		StorageVersion: r.GroupVersion(), MemoryVersion: r.GroupVersion(),
	})
	if r.StorageVersion != nil {
		codec, err = registry.NewViaInternalCodec(r)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("apiserver: storage codec for %s: %w", r.GroupResource(), err)
	}
	if r.Custom != nil {
		codec = r.Custom.StorageCodec // JSON, as kube-apiserver stores custom resources
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
		return nil, nil, nil, err
	}
	closeStore := func() {}
	if c, ok := store.(interface{ Close() }); ok {
		closeStore = c.Close
	}
	cached, err := sqlstorage.NewCached(sqlstorage.CacherOptions{
		Store: store, Options: opts, GetAttrs: r.Attrs, KeyFunc: r.ObjectKey,
		NoSizeEstimate: s.cfg.NoMetricsEndpoint, // no counts to report it in (observeCount)
		BookmarkTick:   s.cfg.WatchCacheBookmarkTick,
	})
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	stopCount := s.observeCount(store, r)
	return cached, func() { stopCount(); cached.Stop(); closeStore() }, cached.Ready, nil
}

// observeCount publishes a stored resource's object count
// (sqlstorage.ObserveObjectCounts) once per resource, whichever of its
// versions' stores asks first; resources stored as another one's objects
// (StorageVersion) are counted as that one. A server without /metrics
// (NoMetricsEndpoint) counts nothing: the counts feed only the
// process-wide apiserver_storage_objects and apiserver_resource_objects,
// where they would overwrite the counts of the process's server that
// serves them (a tenant host's own), and reading them is a query or two
// per resource every minute: most of what an idle tenant asked of its
// datastore once its Leases were gone.
func (s *Server) observeCount(store k8sstorage.Interface, r *registry.Resource) (stop func()) {
	if r.StorageVersion != nil || s.cfg.NoMetricsEndpoint {
		return func() {}
	}
	gr := r.GroupResource()
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	if s.counts == nil {
		s.counts = map[schema.GroupResource]*countObserver{}
	}
	o := s.counts[gr]
	if o == nil {
		o = &countObserver{stop: sqlstorage.ObserveObjectCounts(store, gr, 0)}
		s.counts[gr] = o
	}
	o.users++
	return func() {
		s.countsMu.Lock()
		defer s.countsMu.Unlock()
		if o.users--; o.users == 0 {
			o.stop()
			delete(s.counts, gr)
		}
	}
}

// countObserver is one resource's count polling, shared by its versions'
// stores.
type countObserver struct {
	stop  func()
	users int
}

// cluster is what bootstrapping writes through.
func (s *Server) cluster() *bootstrap.Cluster {
	return &bootstrap.Cluster{
		Etcd: s.cfg.Client.Client, Logger: s.cfg.Logger, ServiceClusterIPRange: s.cfg.ServiceClusterIPRange,
		ClusterIPs: s.api.ClusterIPs, NodePorts: s.api.NodePorts, Registry: s.api.Registry, Storages: s.api.Storages, Loopback: s.loopback,
	}
}

// Bootstrap creates what a fresh cluster has: the system namespaces, the
// system priority classes, the default ServiceCIDR, flow control's
// default priority levels and flow schemas and Kubernetes' bootstrap RBAC
// policy (reconciled at every start). It is idempotent.
func (s *Server) Bootstrap(ctx context.Context) error { return bootstrap.Run(ctx, s.cluster()) }

// RunKubernetesService keeps the default/kubernetes service, its
// Endpoints and EndpointSlice until ctx ends (bootstrap.RunKubernetesService).
func (s *Server) RunKubernetesService(ctx context.Context, opts bootstrap.KubernetesServiceOptions) {
	bootstrap.RunKubernetesService(ctx, s.cluster(), opts)
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.echo }

// StopWatches ends every open watch (clients watch again elsewhere or
// after a restart); call it before shutting the HTTP server down, which
// waits for requests to finish.
func (s *Server) StopWatches() { s.stopOnce.Do(func() { close(s.api.Stopping) }) }

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
	e.HTTPErrorHandler = responses.EchoError
	// s.authn and s.authz are made after the routes (startAuth): the
	// filters reach them through these.
	authn := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if s.authn == nil {
			return nil, false, nil // not started: only the loopback is served
		}
		return s.authn.AuthenticateRequest(req)
	})
	authorize := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if s.api.Authz == nil {
			return authorizer.DecisionNoOpinion, "authorizer not started", nil
		}
		return s.api.Authz.Authorize(ctx, a)
	})
	requestMetrics := &filters.RequestMetrics{Off: s.cfg.DisableRequestMetrics, Describe: newRequestFacts(s).Describe}
	e.Use(filters.RequestInfo, requestMetrics.Middleware, filters.Timeout, filters.Authentication(authn, s.cfg.Authenticate, s.anonymousAuth()))
	if s.cfg.Audit != nil {
		e.Use(s.cfg.Audit.Middleware) // rejected requests (429 below) are audited too
	}
	e.Use(filters.Impersonation(authorize))
	limiter := filters.NewInflightLimiter(s.cfg.MaxRequestsInflight, s.cfg.MaxMutatingRequestsInflight)
	stopInflight := make(chan struct{})
	limiter.PublishMetrics(stopInflight)
	s.stops = append(s.stops, func() { close(stopInflight) })
	e.Use(limiter.Middleware)
	e.Use(filters.Authorization(authorize))
	for _, p := range []string{"/healthz", "/livez"} {
		e.GET(p, func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	}
	e.GET("/readyz", s.readyz)
	// The API server's metrics (metrics.go): requests, admission,
	// storage (watch caches, fan-out, list latency by source, etcd
	// request latency, object counts, database size); authenticated like
	// the API.
	sqlstorage.RegisterMetrics()
	if !s.cfg.NoMetricsEndpoint {
		var more prometheus.Gatherer = s.aggMetrics
		if s.cfg.Metrics != nil {
			more = prometheus.Gatherers{s.cfg.Metrics, s.aggMetrics}
		}
		e.GET("/metrics", echo.WrapHandler(metricsHandler(s.cfg.MetricsFamilies, s.cfg.MetricsClientHosts, more)))
	}
	e.GET("/version", s.discovery.ServeVersion)
	e.GET(serviceaccount.OpenIDConfigPath, s.openIDConfig)
	e.GET(serviceaccount.JWKSPath, s.openIDKeys)
	e.GET("/openapi/v2", s.openAPIV2)
	e.GET("/openapi/v3", s.openAPIV3Index)
	e.GET("/openapi/v3/*", s.openAPIV3Doc)
	e.GET("/api", s.discovery.ServeVersions)
	e.GET("/apis", s.discovery.ServeGroups)
	e.Any("/api/*", s.serveResource)
	e.Any("/apis/*", s.serveResource)
	return e
}

// anonymousAuth says whether requests without credentials act as
// system:anonymous on every path (Config.DisableAnonymousAuth).
func (s *Server) anonymousAuth() bool {
	return !s.cfg.DisableAnonymousAuth && s.cfg.AuthorizationMode != authz.ModeAlwaysAllow
}
