package sqlstore

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reg         prometheus.Registerer
	collectors  []prometheus.Collector
	sqlDuration *prometheus.HistogramVec
	batchSize   prometheus.Histogram
	current     prometheus.Gauge
	compacted   prometheus.Gauge
	dbSize      prometheus.Gauge
	dbInUse     prometheus.Gauge
	watchers    prometheus.Gauge
	eventsSent  prometheus.Counter
	leaseOps    *prometheus.CounterVec
	diskFull    prometheus.Gauge
	reserve     prometheus.Gauge
	fences      prometheus.Counter
	compactions *prometheus.CounterVec
	compactTime prometheus.Histogram
	notifyLag   prometheus.Histogram
	// commitDuration is the COMMIT alone, of a write transaction.
	commitDuration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reg: reg,
		sqlDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sqlkube", Subsystem: "sql", Name: "transaction_duration_seconds",
			Help:    "Duration of SQL transactions by kind (read, write batch).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"kind"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sqlkube", Subsystem: "sql", Name: "group_commit_batch_size",
			Help:    "Write requests committed per database transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		current: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "current_revision", Help: "Current revision.",
		}),
		compacted: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "compacted_revision", Help: "Compacted revision.",
		}),
		dbSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "db_size_bytes", Help: "Database size in bytes, as last measured.",
		}),
		dbInUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "db_size_in_use_bytes",
			Help: "How much of the database size holds data, as last measured (etcd's Status reads it; the rest is free space a defragmentation gives back; PostgreSQL reports its size).",
		}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "watchers", Help: "Live watches.",
		}),
		eventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "watch_events_total", Help: "Events delivered to watches.",
		}),
		leaseOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "lease_operations_total", Help: "Lease operations by kind.",
		}, []string{"op"}),
		diskFull: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "disk_full",
			Help: "1 while the disk under a SQLite datastore is full: writes that could grow the store are refused, reads, deletes and compaction go on, and writes resume once there is space.",
		}),
		reserve: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "disk_reserve_bytes",
			Help: "Bytes a SQLite datastore holds in reserve for a full disk (0 while it is given back, or without one).",
		}),
		fences: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sqlkube", Subsystem: "store", Name: "fences_total",
			Help: "Times the database was found to have lost revisions this server had seen (a failover to a standby that lacked them, a restore), and they were fenced off: every watch ended with 410 Gone.",
		}),
	}
	m.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sqlkube", Subsystem: "store", Name: "compactions_total",
		Help: "Compactions this server ran, by result (succeeded, failed); a request below the compacted revision or above the current one is neither.",
	}, []string{"result"})
	m.compactTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sqlkube", Subsystem: "store", Name: "compaction_duration_seconds",
		Help:    "How long a compaction took, its history removal included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms … 262 s
	})
	m.notifyLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sqlkube", Subsystem: "store", Name: "notify_lag_seconds",
		Help:    "PostgreSQL: from this server's COMMIT of a revision to its NOTIFY arriving back on this server's LISTEN connection, which wakes the watches of every server (other servers' commits are not timed here).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms … 4 s
	})
	m.commitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sqlkube", Subsystem: "sql", Name: "commit_duration_seconds",
		Help:    "The COMMIT of a write transaction alone: on SQLite (WAL, synchronous=FULL) the WAL's write and fsync; on PostgreSQL and MySQL the server's commit, its WAL flush and any synchronous replica's acknowledgement included.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	})
	m.collectors = []prometheus.Collector{m.commitDuration, m.notifyLag, m.sqlDuration, m.batchSize, m.current, m.compacted, m.dbSize, m.dbInUse, m.watchers, m.eventsSent, m.leaseOps, m.diskFull, m.reserve, m.fences, m.compactions, m.compactTime}
	if reg != nil {
		for _, c := range m.collectors {
			_ = reg.Register(c)
		}
	}
	return m
}

// watchQuota adds the gauges that read the store's quota and its NOSPACE
// alarm as this process knows them.
func (m *metrics) watchQuota(s *Store) {
	quota := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sqlkube", Subsystem: "store", Name: "quota_bytes",
		Help: "The store's space quota in bytes (--quota-backend-bytes); -1: none.",
	}, func() float64 { return float64(s.QuotaBytes()) })
	nospace := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sqlkube", Subsystem: "store", Name: "nospace_alarm",
		Help: "1 while the NOSPACE alarm is active (writes that grow the store are refused), as this server last read or set it; else 0.",
	}, func() float64 {
		s.quota.mu.Lock()
		defer s.quota.mu.Unlock()
		if hasNoSpace(s.quota.alarms) {
			return 1
		}
		return 0
	})
	m.collectors = append(m.collectors, quota, nospace)
	if m.reg != nil {
		_ = m.reg.Register(quota)
		_ = m.reg.Register(nospace)
	}
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

func (m *metrics) setRevisions(current, compacted int64) {
	m.current.Set(float64(current))
	m.compacted.Set(float64(compacted))
}

func (m *metrics) setCurrent(current int64) { m.current.Set(float64(current)) }
