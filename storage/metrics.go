package storage

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	cachermetrics "k8s.io/apiserver/pkg/storage/cacher/metrics"
	etcd3metrics "k8s.io/apiserver/pkg/storage/etcd3/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// listDuration is list latency by the source that answered: the watch cache
// or the store underneath it.
var listDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: "sqlkube", Subsystem: "storage", Name: "list_duration_seconds",
	Help:    "Latency of GetList by resource and by the source that served it (cache or store).",
	Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
}, []string{"resource", "source"})

var registerOnce sync.Once

// MetricsHandler registers the storage layer's metrics and returns a
// handler serving them in Prometheus text format: the upstream watch cache's
// (apiserver_watch_cache_* capacity and events received and dispatched,
// apiserver_cache_list_*, apiserver_terminated_watchers_total for slow
// watchers cut off), the etcd3 store's (etcd_request_duration_seconds,
// apiserver_storage_list_*, apiserver_storage_objects) and
// sqlkube_storage_list_duration_seconds{source="cache"|"store"}, and the
// decoupled watches' sqlkube_storage_watchers,
// sqlkube_storage_watchers_terminated_total and
// sqlkube_storage_watch_events_dispatched_total.
func MetricsHandler() http.Handler {
	registerMetrics()
	return legacyregistry.Handler()
}

// RegisterMetrics registers the storage layer's metrics (those
// MetricsHandler lists) in Kubernetes' legacy registry, once.
func RegisterMetrics() { registerMetrics() }

// registerMetrics registers the metrics once; stores and caches call it
// before they start, since upstream metrics used before registration stay
// silent.
func registerMetrics() {
	registerOnce.Do(func() {
		cachermetrics.Register()
		etcd3metrics.Register()
		legacyregistry.RawMustRegister(listDuration, watchersGauge, watchersTerminated, eventsDispatched, watchesDelegated)
	})
}

// NewCached returns a resource's storage as kube-apiserver serves it: the
// watch cache in front of the store, reads and watches served from memory
// when their resourceVersion allows, everything else (and every write)
// passed to the store. Watches are served by a Fanout, so a slow consumer
// never holds up the others. Stop it when done.
func NewCached(o CacherOptions) (*Cached, error) {
	store := &markingStore{Interface: o.Store}
	o.Store = store
	c, err := NewCacher(o)
	if err != nil {
		return nil, err
	}
	d := cacher.NewCacheDelegator(c, store)
	resource := o.Options.GroupResource.String()
	f := NewFanout(FanoutOptions{
		Source: d, Store: o.Store, ResourcePrefix: o.Options.ResourcePrefix, Resource: resource,
		KeyFunc: o.KeyFunc, GetAttrs: o.GetAttrs, NewFunc: o.Options.NewFunc, NewListFunc: o.Options.NewListFunc,
		Buffer: o.WatchBuffer, SourceReady: c.Ready,
	})
	return &Cached{
		Interface: &timedLists{Interface: &fannedOut{Interface: d, fanout: f}, resource: resource},
		cacher:    c,
		delegator: d,
		fanout:    f,
	}, nil
}

// Cached is a resource's storage with its watch cache (NewCached).
type Cached struct {
	k8sstorage.Interface
	cacher    *cacher.Cacher
	delegator *cacher.CacheDelegator
	fanout    *Fanout
}

// Ready reports whether the watch cache has been filled from the store and
// the fan-out serves watches (until then reads and watches go to the store
// or the watch cache).
func (c *Cached) Ready() bool { return c.cacher.Ready() && c.fanout.Ready() }

// Stop stops the watch cache; its open watches end.
func (c *Cached) Stop() {
	c.fanout.Stop()
	c.delegator.Stop()
	c.cacher.Stop()
}

type servedByStoreKey struct{}

// markingStore notes, on the request's context, that the store answered a
// list the cache passed down.
type markingStore struct{ k8sstorage.Interface }

func (m *markingStore) GetList(ctx context.Context, key string, opts k8sstorage.ListOptions, listObj runtime.Object) error {
	if hit, ok := ctx.Value(servedByStoreKey{}).(*atomic.Bool); ok {
		hit.Store(true)
	}
	return m.Interface.GetList(ctx, key, opts, listObj)
}

// timedLists measures GetList and labels it with the source that served it.
type timedLists struct {
	k8sstorage.Interface
	resource string
}

func (t *timedLists) GetList(ctx context.Context, key string, opts k8sstorage.ListOptions, listObj runtime.Object) error {
	hit := &atomic.Bool{}
	start := time.Now()
	err := t.Interface.GetList(context.WithValue(ctx, servedByStoreKey{}, hit), key, opts, listObj)
	source := "cache"
	if hit.Load() {
		source = "store"
	}
	listDuration.WithLabelValues(t.resource, source).Observe(time.Since(start).Seconds())
	return err
}
