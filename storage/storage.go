// Package storage gives sqlkube's API server Kubernetes storage semantics
// (k8s.io/apiserver/pkg/storage.Interface: resourceVersions, conflicts,
// pagination, watch from a revision, 410 Gone after compaction) over
// sqlkube's etcd API.
//
// It composes the upstream implementations rather than re-deriving them: the
// etcd3 store of k8s.io/apiserver speaks to an etcd client, and the upstream
// watch cache (cacher) sits in front of it. The client reaches sqlkube's
// store one of two ways: in-process (Local: no listener, no gRPC, no protobuf
// encoding) when everything runs in one binary, or over gRPC (Remote) to a
// `sqlkube etcd` or a real etcd. Values are encoded exactly as kube-apiserver
// encodes them, under the same /registry keys, so a database written by one
// is readable by the other.
package storage

import (
	"crypto/tls"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericfeatures "k8s.io/apiserver/pkg/features"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/utils/clock"

	"github.com/sqlkube/sqlkube/etcdshim"
)

// DefaultPrefix is where Kubernetes keeps its objects.
const DefaultPrefix = "/registry"

// Local returns a client that reaches srv in-process. Close it when done.
func Local(srv *etcdshim.Server) *kubernetes.Client {
	c := wrap(srv.LocalClient())
	// The apiserver serves consistent lists from the watch cache, and
	// watch-list requests at all, only once its process-wide feature checker
	// has learnt etcd's version from a Status call to one of a client's
	// endpoints (the etcd3 store starts that check). The in-process client
	// has no endpoints, so it is checked here under a name of its own.
	name := fmt.Sprintf("sqlkube-in-process-%d", localClients.Add(1))
	etcdfeature.DefaultFeatureSupportChecker.CheckClient(c.Ctx(), namedClient{c.Client, name}, k8sstorage.RequestWatchProgress)
	return c
}

// localClients numbers the in-process clients.
var localClients atomic.Int64

// namedClient gives an in-process client an endpoint name; its Status
// answers whatever endpoint is asked.
type namedClient struct {
	*clientv3.Client
	name string
}

func (n namedClient) Endpoints() []string { return []string{n.name} }

// RemoteConfig locates an etcd endpoint.
type RemoteConfig struct {
	Endpoints []string
	TLS       *tls.Config
}

// Remote dials an etcd endpoint (a `sqlkube etcd` or a real etcd).
func Remote(cfg RemoteConfig) (*kubernetes.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:          cfg.Endpoints,
		TLS:                cfg.TLS,
		DialTimeout:        10 * time.Second,
		DialKeepAliveTime:  30 * time.Second,
		MaxCallSendMsgSize: 8 << 20,
		Logger:             zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("storage: connect to %v: %w", cfg.Endpoints, err)
	}
	return wrap(c), nil
}

func wrap(c *clientv3.Client) *kubernetes.Client {
	kc := &kubernetes.Client{Client: c}
	kc.Kubernetes = kc
	return kc
}

// Options describe one resource's store.
type Options struct {
	// Codec encodes objects as kube-apiserver stores them (protobuf for
	// built-in types, JSON for custom resources).
	Codec runtime.Codec
	// NewFunc and NewListFunc make empty objects of the resource.
	NewFunc, NewListFunc func() runtime.Object
	// Prefix is the key prefix of all resources (default /registry).
	Prefix string
	// ResourcePrefix is the resource's folder under Prefix, e.g. "/pods" or
	// "/apps/deployments" (as kube-apiserver names them).
	ResourcePrefix string
	GroupResource  schema.GroupResource
	// Transformer encrypts values at rest; default: none.
	Transformer value.Transformer
	// Compactor is shared by the stores of one client; see NewCompactor.
	Compactor etcd3.Compactor
	// LeaseReuseDurationSeconds is how long objects created with a TTL
	// share one etcd lease, which lives up to that much longer than the
	// TTL; default 60, as kube-apiserver.
	LeaseReuseDurationSeconds int64
}

// NewCompactor compacts the store behind c every interval (0: never; the
// store's own automatic compaction may be enough) and lets stores learn the
// compacted revision. Stop it when done.
func NewCompactor(c *kubernetes.Client, interval time.Duration) StoppableCompactor {
	return etcd3.NewCompactor(c.Client, interval, clock.RealClock{}, nil)
}

// StoppableCompactor is a compactor with its Stop.
type StoppableCompactor interface {
	etcd3.Compactor
	Stop()
}

// NewStore returns the storage interface for one resource over c. Close it
// (through its Close method) when done.
func NewStore(c *kubernetes.Client, o Options) (k8sstorage.Interface, error) {
	registerMetrics()
	if o.Codec == nil || o.NewFunc == nil || o.NewListFunc == nil || o.ResourcePrefix == "" {
		return nil, fmt.Errorf("storage: Codec, NewFunc, NewListFunc and ResourcePrefix are required")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Transformer == nil {
		o.Transformer = identity.NewEncryptCheckTransformer()
	}
	if o.Compactor == nil {
		return nil, fmt.Errorf("storage: a Compactor is required (NewCompactor)")
	}
	leases := etcd3.NewDefaultLeaseManagerConfig()
	if o.LeaseReuseDurationSeconds > 0 {
		leases.ReuseDurationSeconds = o.LeaseReuseDurationSeconds
	}
	versioner := k8sstorage.APIObjectVersioner{}
	transformer, decoder := o.Transformer, etcd3.NewDefaultDecoder(o.Codec, versioner)
	// As kube-apiserver's storage factory: while the gate is on (Beta and on
	// by default since 1.37), an object that cannot be read back is
	// reported as corrupt, which lets a delete that asks for it remove it.
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion) {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	store, err := etcd3.New(c, o.Compactor, o.Codec, o.NewFunc, o.NewListFunc, o.Prefix, o.ResourcePrefix, o.GroupResource,
		transformer, leases, decoder, versioner)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return store, nil
}
