package sqlstore

import (
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolStats are one connection pool's figures at one moment.
type poolStats struct {
	max, open, inUse, idle int64 // max 0: no limit
	waits                  int64
	waited                 time.Duration
}

func sqlDBStats(db *sql.DB) func() poolStats {
	return func() poolStats {
		st := db.Stats()
		return poolStats{max: int64(st.MaxOpenConnections), open: int64(st.OpenConnections), inUse: int64(st.InUse),
			idle: int64(st.Idle), waits: st.WaitCount, waited: st.WaitDuration}
	}
}

func pgxPoolStats(p *pgxpool.Pool) func() poolStats {
	return func() poolStats {
		st := p.Stat()
		return poolStats{max: int64(st.MaxConns()), open: int64(st.TotalConns()), inUse: int64(st.AcquiredConns()),
			idle: int64(st.IdleConns()), waits: st.EmptyAcquireCount(), waited: st.EmptyAcquireWaitTime()}
	}
}

// poolCollector reports the use of connection pools, each named by the
// label pool: a store's own (read, write) or a host's shared one.
type poolCollector struct {
	pools                         map[string]func() poolStats
	max, conns, waits, waitedSecs *prometheus.Desc
}

func newPoolCollector(pools map[string]func() poolStats) *poolCollector {
	return &poolCollector{
		pools: pools,
		max: prometheus.NewDesc("sqlkube_sql_pool_max_connections",
			"The most connections the pool may open (0: no limit).", []string{"pool"}, nil),
		conns: prometheus.NewDesc("sqlkube_sql_pool_connections",
			"The pool's open connections, by state (in_use, idle).", []string{"pool", "state"}, nil),
		waits: prometheus.NewDesc("sqlkube_sql_pool_waits_total",
			"Times a statement waited for a connection because every one was in use.", []string{"pool"}, nil),
		waitedSecs: prometheus.NewDesc("sqlkube_sql_pool_wait_seconds_total",
			"Time statements spent waiting for a connection.", []string{"pool"}, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.max
	ch <- c.conns
	ch <- c.waits
	ch <- c.waitedSecs
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for name, stats := range c.pools {
		st := stats()
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(st.max), name)
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(st.inUse), name, "in_use")
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(st.idle), name, "idle")
		ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(st.waits), name)
		ch <- prometheus.MustNewConstMetric(c.waitedSecs, prometheus.CounterValue, st.waited.Seconds(), name)
	}
}

// watchPools adds the collector of the store's own pools (none on a
// shared pool: its host reports that one, Shared.Collector).
func (m *metrics) watchPools(c *conns) {
	pools := map[string]func() poolStats{"read": sqlDBStats(c.read)}
	if c.write != nil && c.write != c.read {
		pools["write"] = sqlDBStats(c.write)
	}
	pc := newPoolCollector(pools)
	m.collectors = append(m.collectors, pc)
	if m.reg != nil {
		_ = m.reg.Register(pc)
	}
}

// Collector reports the shared pool's use, as sqlkube_sql_pool_* with
// pool="shared"; a host registers it once, for all its tenants.
func (h *Shared) Collector() prometheus.Collector {
	return newPoolCollector(map[string]func() poolStats{"shared": pgxPoolStats(h.pool)})
}
