package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// series is the value of reg's series name{label=value} (a counter's, a
// gauge's or a histogram's count), or -1 if reg has no such series.
func series(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && !hasLabel(m, label, value) {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			default:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestMetrics_CompactionsQuotaAlarm: a compaction is counted, with its
// duration, once it succeeds, and a request below the compacted revision
// is not counted; the pools' connections, the quota and the NOSPACE
// alarm are reported as the store has them.
func TestMetrics_CompactionsQuotaAlarm(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s := openWith(t, sqlstore.Options{DSN: "sqlite://" + filepath.Join(t.TempDir(), "state.db"), QuotaBytes: 64 << 20, Registerer: reg})

	if q := series(t, reg, "sqlkube_store_quota_bytes", "", ""); q != 64<<20 {
		t.Errorf("sqlkube_store_quota_bytes = %v, want %d", q, 64<<20)
	}
	if a := series(t, reg, "sqlkube_store_nospace_alarm", "", ""); a != 0 {
		t.Errorf("sqlkube_store_nospace_alarm of a new store = %v, want 0", a)
	}
	if n := series(t, reg, "sqlkube_store_compactions_total", "result", "succeeded"); n > 0 {
		t.Errorf("compactions before any: %v", n)
	}

	put(t, s, "a", "1")
	rev := put(t, s, "a", "2")
	if _, err := s.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(ctx, rev); !errors.Is(err, sqlstore.ErrCompacted) {
		t.Fatalf("compacting again at %d: %v, want ErrCompacted", rev, err)
	}
	if n := series(t, reg, "sqlkube_store_compactions_total", "result", "succeeded"); n != 1 {
		t.Errorf("sqlkube_store_compactions_total{result=succeeded} = %v, want 1 (the refused request is not a compaction)", n)
	}
	if n := series(t, reg, "sqlkube_store_compactions_total", "result", "failed"); n > 0 {
		t.Errorf("sqlkube_store_compactions_total{result=failed} = %v, want none", n)
	}
	if n := series(t, reg, "sqlkube_store_compaction_duration_seconds", "", ""); n != 1 {
		t.Errorf("sqlkube_store_compaction_duration_seconds has %v observations, want 1", n)
	}
	if c := series(t, reg, "sqlkube_store_compacted_revision", "", ""); c != float64(rev) {
		t.Errorf("sqlkube_store_compacted_revision = %v, want %d", c, rev)
	}

	// SQLite's two pools: the writer's one connection, and the readers'.
	if m := series(t, reg, "sqlkube_sql_pool_max_connections", "pool", "write"); m != 1 {
		t.Errorf("sqlkube_sql_pool_max_connections{pool=write} = %v, want 1", m)
	}
	if n := series(t, reg, "sqlkube_sql_pool_connections", "pool", "read"); n < 0 {
		t.Errorf("no sqlkube_sql_pool_connections{pool=read}")
	}
	if n := series(t, reg, "sqlkube_sql_pool_waits_total", "pool", "write"); n < 0 {
		t.Errorf("no sqlkube_sql_pool_waits_total{pool=write}")
	}

	alarm := sqlstore.Alarm{MemberID: 1, Type: sqlstore.AlarmNoSpace}
	if err := s.ActivateAlarm(ctx, alarm); err != nil {
		t.Fatal(err)
	}
	if a := series(t, reg, "sqlkube_store_nospace_alarm", "", ""); a != 1 {
		t.Errorf("sqlkube_store_nospace_alarm while raised = %v, want 1", a)
	}
	if _, err := s.DeactivateAlarm(ctx, alarm); err != nil {
		t.Fatal(err)
	}
	if a := series(t, reg, "sqlkube_store_nospace_alarm", "", ""); a != 0 {
		t.Errorf("sqlkube_store_nospace_alarm once cleared = %v, want 0", a)
	}
	s.SetQuotaBytes(128 << 20)
	if q := series(t, reg, "sqlkube_store_quota_bytes", "", ""); q != 128<<20 {
		t.Errorf("sqlkube_store_quota_bytes after SetQuotaBytes = %v, want %d", q, 128<<20)
	}
}

// TestMetrics_SizeInUse: the size in use is reported as SizeInUse (etcd's
// Status) last measured it, and keys deleted and compacted away free
// what they held.
func TestMetrics_SizeInUse(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s := openWith(t, sqlstore.Options{DSN: "sqlite://" + filepath.Join(t.TempDir(), "state.db"), Registerer: reg})
	if v := series(t, reg, "sqlkube_store_db_size_in_use_bytes", "", ""); v != 0 {
		t.Errorf("sqlkube_store_db_size_in_use_bytes before a measurement = %v, want 0", v)
	}
	value := make([]byte, 64<<10)
	for i := range 64 {
		if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i)), Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	full, err := s.SizeInUse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, rev, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte("k"), End: []byte("l")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	inUse, err := s.SizeInUse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := series(t, reg, "sqlkube_store_db_size_in_use_bytes", "", ""); got != float64(inUse) || inUse <= 0 {
		t.Errorf("sqlkube_store_db_size_in_use_bytes = %v, want SizeInUse's %d (> 0)", got, inUse)
	}
	if inUse > full-(2<<20) {
		t.Errorf("in use: %d bytes with 4 MiB of values, %d once they were deleted and compacted, want at least 2 MiB less", full, inUse)
	}
}

// TestMetrics_NotifyLag: on PostgreSQL, a store times the NOTIFY of each
// revision it commits, until it comes back on its LISTEN connection: a
// store of its own database (LISTEN sqlkube_revision), and a tenant of a
// shared handle (one LISTEN for all its tenants).
func TestMetrics_NotifyLag(t *testing.T) {
	dsn := postgresDSN(t)
	for _, tc := range []struct {
		name string
		open func(reg *prometheus.Registry) *sqlstore.Store
	}{
		{"own database", func(reg *prometheus.Registry) *sqlstore.Store {
			return openWith(t, sqlstore.Options{DSN: dsn, Registerer: reg})
		}},
		{"shared handle", func(reg *prometheus.Registry) *sqlstore.Store {
			h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2})
			return openWith(t, sqlstore.Options{Shared: h, Tenant: provisioned(t, h, "lag"), Registerer: reg})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s := tc.open(reg)
			const writes = 20
			for i := range writes {
				if _, _, err := s.Put(context.Background(), sqlstore.PutRequest{Key: []byte(fmt.Sprintf("/lag/%d", i)), Value: []byte("v")}); err != nil {
					t.Fatal(err)
				}
			}
			if n := series(t, reg, "sqlkube_sql_commit_duration_seconds", "", ""); n < writes {
				t.Errorf("sqlkube_sql_commit_duration_seconds has %v observations after %d commits", n, writes)
			}
			// Each write is a commit of its own, whose NOTIFY is timed
			// when it comes back while the LISTEN connection is up, which
			// it may not yet be for the first: wait for half of them.
			deadline := time.Now().Add(10 * time.Second)
			for {
				n := series(t, reg, "sqlkube_store_notify_lag_seconds", "", "")
				if n >= writes/2 && n <= writes {
					return
				}
				if n > writes || time.Now().After(deadline) {
					t.Fatalf("sqlkube_store_notify_lag_seconds has %v observations after %d commits, want about as many", n, writes)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
