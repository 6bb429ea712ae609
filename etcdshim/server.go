package etcdshim

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// MaxRequestBytes is etcd's default request limit: larger requests are
// refused with "etcdserver: request is too large".
const MaxRequestBytes = 1536 * 1024

// maxRecvBytes is how large a message gRPC accepts: requests between
// MaxRequestBytes and it reach the check that answers with etcd's "request is
// too large" (etcd itself lets gRPC refuse anything over 2 MiB with a bare
// ResourceExhausted); larger ones still get gRPC's ResourceExhausted.
const maxRecvBytes = 8 << 20

// maxSendBytes is the largest response gRPC sends, as etcd's: a txn stops
// reading once its ranges have read more (sqlstore.ErrResultTooLarge),
// since its answer could not be sent.
const maxSendBytes = math.MaxInt32

// MaxTxnOps is etcd's default limit of operations in one txn.
const MaxTxnOps = 128

// Version is the etcd version sqlkube reports (Status, etcdctl endpoint
// status): the etcd release Kubernetes v1.37 is built and tested with,
// whose client and server modules go.mod pins.
const Version = "3.7.0"

// Options configure a Server.
type Options struct {
	Backend Backend
	Logger  zerolog.Logger
	// Name and ClientURLs describe this member in MemberList.
	Name       string
	ClientURLs []string
	// ClusterKey identifies the datastore; instances on one database report
	// the same cluster ID.
	ClusterKey string
	// TLS, if set, serves gRPC over TLS.
	TLS *tls.Config
	// ProgressNotifyInterval is how often idle watches asking for progress
	// notifications get one (etcd: 10 minutes).
	ProgressNotifyInterval time.Duration
	// Registerer, if set, receives RPC metrics (latency, watch streams,
	// recovered handler panics).
	Registerer prometheus.Registerer
}

// Server is the etcd v3 API over a Backend.
type Server struct {
	opts      Options
	be        Backend
	log       zerolog.Logger
	grpc      *grpc.Server
	health    *health.Server
	memberID  uint64
	clusterID uint64
	rpcTime   *prometheus.HistogramVec
	watchers  prometheus.Gauge
	panics    *prometheus.CounterVec

	// stopping ends when Stop begins; long-lived streams (watch, lease
	// keepalive) end with it, so GracefulStop does not wait for them.
	stopping context.Context
	stop     context.CancelFunc

	mu      sync.Mutex
	streams map[*watchStream]struct{}
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// New builds a Server; call Serve to accept connections.
func New(opts Options) *Server {
	if opts.ProgressNotifyInterval <= 0 {
		opts.ProgressNotifyInterval = 10 * time.Minute
	}
	if opts.Name == "" {
		opts.Name = "sqlkube"
	}
	s := &Server{
		opts:      opts,
		be:        opts.Backend,
		log:       opts.Logger.With().Str("component", "etcdshim").Logger(),
		memberID:  hash64(opts.Name + "|" + strings.Join(opts.ClientURLs, ",")),
		clusterID: hash64("sqlkube|" + opts.ClusterKey),
		streams:   map[*watchStream]struct{}{},
		rpcTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sqlkube", Subsystem: "etcd", Name: "rpc_duration_seconds",
			Help:    "Latency of etcd API calls by method and gRPC code.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"method", "code"}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "etcd", Name: "watch_streams", Help: "Open watch streams.",
		}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sqlkube", Subsystem: "etcd", Name: "handler_panics_total",
			Help: "Panics recovered in etcd API handlers (each answered with code Internal), by method.",
		}, []string{"method"}),
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	if opts.Registerer != nil {
		_ = opts.Registerer.Register(s.rpcTime)
		_ = opts.Registerer.Register(s.watchers)
		_ = opts.Registerer.Register(s.panics)
	}
	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecvBytes),
		grpc.MaxSendMsgSize(maxSendBytes),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.UnaryInterceptor(s.unaryInterceptor),
		grpc.StreamInterceptor(s.streamInterceptor),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
	}
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s.grpc = grpc.NewServer(gopts...)
	pb.RegisterKVServer(s.grpc, &kvServer{s: s})
	pb.RegisterWatchServer(s.grpc, &watchServer{s: s})
	pb.RegisterLeaseServer(s.grpc, &leaseServer{s: s})
	pb.RegisterMaintenanceServer(s.grpc, &maintenanceServer{s: s})
	pb.RegisterClusterServer(s.grpc, &clusterServer{s: s})
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s
}

// Serve accepts connections on l until Stop.
func (s *Server) Serve(l net.Listener) error { return s.grpc.Serve(l) }

// Stop ends watch and lease keepalive streams, lets in-flight calls finish
// for up to timeout, then closes every connection.
func (s *Server) Stop(timeout time.Duration) {
	s.health.Shutdown()
	s.stop()
	s.mu.Lock()
	for ws := range s.streams {
		ws.cancel()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		s.grpc.Stop()
	}
}

func (s *Server) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: s.clusterID, MemberId: s.memberID, Revision: rev, RaftTerm: 1}
}

// unaryInterceptor times every call and turns a panic in a handler into
// an error (see recovered) instead of a dead process.
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	method := methodName(info.FullMethod)
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, s.recovered(method, r)
		}
		s.rpcTime.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
		if err != nil && s.log.GetLevel() <= zerolog.DebugLevel {
			s.log.Debug().Str("method", info.FullMethod).Err(err).Msg("rpc failed")
		}
	}()
	return handler(ctx, req)
}

// streamInterceptor is unaryInterceptor for streams. It recovers panics in
// the handler's own goroutine; the goroutines a handler starts recover
// their own (see watchStream.recoverPanic).
func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	start := time.Now()
	method := methodName(info.FullMethod)
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(method, r)
		}
		s.rpcTime.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
	}()
	return handler(srv, ss)
}

// errPanicked answers a call whose handler panicked. It is the only
// Internal this package answers: a handler that meets bad input answers
// InvalidArgument or etcd's own error.
var errPanicked = status.Error(codes.Internal, "etcdserver: internal error (sqlkube recovered a panic; see the server's log)")

// recovered logs a recovered panic with its stack, counts it by method and
// returns errPanicked.
func (s *Server) recovered(method string, r any) error {
	s.panics.WithLabelValues(method).Inc()
	s.log.Error().Str("method", method).Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).
		Msg("etcd API handler panicked; answered Internal")
	return errPanicked
}

func methodName(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}
