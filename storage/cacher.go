package storage

import (
	"fmt"
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// CacherOptions describe one resource's watch cache.
type CacherOptions struct {
	// Store is the resource's store (NewStore); writes go through to it.
	Store k8sstorage.Interface
	// Options are the ones the store was built with.
	Options Options
	// GetAttrs returns the labels and fields selectors match on.
	GetAttrs func(runtime.Object) (labels.Set, fields.Set, error)
	// KeyFunc maps an object to its storage key (as the registry does).
	KeyFunc func(runtime.Object) (string, error)
	// IndexerFuncs index watchers by a field (at most one, e.g.
	// spec.nodeName for pods); Indexers index the cached objects, e.g. by
	// namespace or node, so selectors controllers use are answered without a
	// scan.
	IndexerFuncs k8sstorage.IndexerFuncs
	Indexers     *cache.Indexers
	// IndexLabels adds an index of the cached objects by each of these
	// label keys (e.g. "app"): a list whose predicate names the key in
	// IndexLabels and whose label selector requires one value for it is
	// answered from the index, not a scan.
	IndexLabels []string
	// EventsHistoryWindow is how long recent events are kept for watches
	// that start in the past (default 75s, as kube-apiserver).
	EventsHistoryWindow time.Duration
	// WatchBuffer is how many events a watcher of NewCached may fall behind
	// before it is terminated with a 429 Status it can resume from
	// (default DefaultWatchBuffer).
	WatchBuffer int
	// BookmarkTick is how often the watch cache hands the bookmarks that
	// are due to the watches it serves (only those the fan-out of
	// NewCached passes to it): 0 is upstream's second. A bookmark, the one
	// that ends a watch's initial events included, may come that much
	// later. See bookmarkClock.
	BookmarkTick time.Duration
	// NoSizeEstimate keeps the store without Kubernetes' estimate of its
	// objects' sizes (feature SizeBasedListCostEstimate), which only its
	// Stats report, for the object-count metrics: the estimate's upkeep
	// reads the store's current revision about once a minute per
	// resource. For servers that publish no metrics.
	NoSizeEstimate bool

	// wrapClock, if set, wraps the watch cache's clock (tests).
	wrapClock func(clock.WithTicker) clock.WithTicker
}

// noSizeEstimate is a store whose cacher keeps no size estimate.
type noSizeEstimate struct{ k8sstorage.Interface }

func (noSizeEstimate) EnableResourceSizeEstimation(k8sstorage.KeysFunc) error { return nil }

// NewCacher puts the upstream watch cache in front of a store: lists and
// watches are served from memory when their resourceVersion allows, writes go
// through. Stop it when done.
func NewCacher(o CacherOptions) (*cacher.Cacher, error) {
	if o.Store == nil || o.GetAttrs == nil || o.KeyFunc == nil {
		return nil, fmt.Errorf("storage: Store, GetAttrs and KeyFunc are required")
	}
	registerMetrics()
	if o.EventsHistoryWindow <= 0 {
		o.EventsHistoryWindow = 75 * time.Second
	}
	indexers := o.Indexers
	if len(o.IndexLabels) > 0 {
		merged := cache.Indexers{}
		if indexers != nil {
			maps.Copy(merged, *indexers)
		}
		for _, key := range o.IndexLabels {
			merged[k8sstorage.LabelIndex(key)] = labelIndexFunc(key)
		}
		indexers = &merged
	}
	store := o.Store
	if o.NoSizeEstimate {
		store = noSizeEstimate{store}
	}
	var clk clock.WithTicker = clock.RealClock{}
	if o.BookmarkTick > 0 {
		clk = bookmarkClock{WithTicker: clk, tick: o.BookmarkTick}
	}
	if o.wrapClock != nil {
		clk = o.wrapClock(clk)
	}
	return cacher.NewCacherFromConfig(cacher.Config{
		Clock:               clk,
		Storage:             store,
		Versioner:           k8sstorage.APIObjectVersioner{},
		GroupResource:       o.Options.GroupResource,
		EventsHistoryWindow: o.EventsHistoryWindow,
		ResourcePrefix:      o.Options.ResourcePrefix,
		KeyFunc:             o.KeyFunc,
		GetAttrsFunc:        o.GetAttrs,
		IndexerFuncs:        o.IndexerFuncs,
		Indexers:            indexers,
		NewFunc:             o.Options.NewFunc,
		NewListFunc:         o.Options.NewListFunc,
		Codec:               o.Options.Codec,
	})
}

// labelIndexFunc indexes objects by the value of one label (objects
// without it are indexed under "", as upstream's label indexes are not
// consulted for selectors that do not require a single value).
func labelIndexFunc(key string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return []string{m.GetLabels()[key]}, nil
	}
}
