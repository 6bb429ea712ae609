package storage

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	etcd3metrics "k8s.io/apiserver/pkg/storage/etcd3/metrics"
)

// DefaultCountPollPeriod is how often object counts are read, as
// kube-apiserver's --etcd-count-metric-poll-period.
const DefaultCountPollPeriod = time.Minute

// ObserveObjectCounts reads the number of a resource's stored objects
// from store (the etcd3 store, not the watch cache) at once and then
// every period (jittered), and publishes it as Kubernetes' registry store
// does: apiserver_storage_objects{resource} and
// apiserver_resource_objects{group,resource} (-1 when the count fails).
// stop ends the polling and removes the resource's series.
//
// The series are process-wide (package variables of
// k8s.io/apiserver/pkg/storage/etcd3/metrics): API servers of one process
// that serve the same resource overwrite each other's count.
func ObserveObjectCounts(store k8sstorage.Interface, gr schema.GroupResource, period time.Duration) (stop func()) {
	registerMetrics()
	if period <= 0 {
		period = DefaultCountPollPeriod
	}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go wait.JitterUntil(func() {
		stats, err := store.Stats(ctx)
		if ctx.Err() != nil {
			return // stopping: the series are being removed
		}
		etcd3metrics.UpdateStoreStats(gr, stats, err)
	}, period, 0.2, true, done)
	return func() {
		cancel()
		close(done)
		etcd3metrics.DeleteStoreStats(gr)
	}
}

// sizeMonitors are the storage clients whose database size
// apiserver_storage_size_bytes reports, one series each
// (storage_cluster_id "etcd-0", "etcd-1"... in the order they were added),
// as kube-apiserver reports each of its etcd clusters.
var sizeMonitors struct {
	sync.Mutex
	clients []*kubernetes.Client
}

// MonitorStorageSize adds c to apiserver_storage_size_bytes (the
// database size its Maintenance Status reports) until remove is called.
func MonitorStorageSize(c *kubernetes.Client) (remove func()) {
	registerMetrics()
	sizeMonitors.Lock()
	defer sizeMonitors.Unlock()
	sizeMonitors.clients = append(sizeMonitors.clients, c)
	etcd3metrics.SetStorageMonitorGetter(storageMonitors)
	return func() {
		sizeMonitors.Lock()
		defer sizeMonitors.Unlock()
		sizeMonitors.clients = slices.DeleteFunc(sizeMonitors.clients, func(o *kubernetes.Client) bool { return o == c })
	}
}

func storageMonitors() ([]etcd3metrics.Monitor, error) {
	sizeMonitors.Lock()
	defer sizeMonitors.Unlock()
	ms := make([]etcd3metrics.Monitor, len(sizeMonitors.clients))
	for i, c := range sizeMonitors.clients {
		ms[i] = sizeMonitor{c}
	}
	return ms, nil
}

// sizeMonitor asks one client's first endpoint (any name, in-process) for
// the database size.
type sizeMonitor struct{ c *kubernetes.Client }

func (m sizeMonitor) Monitor(ctx context.Context) (etcd3metrics.StorageMetrics, error) {
	endpoint := ""
	if eps := m.c.Endpoints(); len(eps) > 0 {
		endpoint = eps[0]
	}
	st, err := m.c.Status(ctx, endpoint)
	if err != nil {
		return etcd3metrics.StorageMetrics{}, err
	}
	return etcd3metrics.StorageMetrics{Size: st.DbSize}, nil
}

func (sizeMonitor) Close() error { return nil }
