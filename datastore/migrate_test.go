package datastore_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sqlkube/sqlkube/datastore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/internal/testetcd"
)

func backend(name string) sqltest.Backend {
	for _, b := range sqltest.Backends() {
		if b.Name == name {
			return b
		}
	}
	return sqltest.Backend{}
}

// TestMigrate_RoundTrip moves ~1,000 Kubernetes-style keys SQLite →
// PostgreSQL → MySQL → etcd → SQLite and checks, after every leg, every key,
// value and lease; on SQL targets the exact revision and the history kept;
// and that a write after the last move gets a revision above the source's.
func TestMigrate_RoundTrip(t *testing.T) {
	ctx := testCtx(t)
	first := backend(sqltest.SQLite).NewDSN(t)
	pg := backend(sqltest.Postgres).NewDSN(t)
	my := backend(sqltest.MySQL).NewDSN(t)
	last := backend(sqltest.SQLite).NewDSN(t)

	s := openStore(t, first)
	want := fill(t, s, 1000)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	legs := []string{first, pg, my}
	etcdLeg := ""
	if addr := testetcd.Start(t, waitFor); addr != "" {
		etcdLeg = "etcd://" + addr
		legs = append(legs, etcdLeg)
	}
	legs = append(legs, last)
	for i := 1; i < len(legs); i++ {
		from, to := legs[i-1], legs[i]
		res, err := datastore.Migrate(ctx, from, to, false, datastore.Options{Progress: &progress})
		if err != nil {
			t.Fatalf("Migrate(%s → %s): %v\n%s", from, to, err, progress.String())
		}
		if res.Keys != int64(len(want.keys)) || res.Leases != int64(len(want.leases)) {
			t.Errorf("%s → %s moved %d keys and %d leases, want %d and %d", from, to, res.Keys, res.Leases, len(want.keys), len(want.leases))
		}
		h := checkKeys(t, to, want)
		switch {
		case to == etcdLeg:
			if h.Revision < want.revision {
				t.Errorf("etcd is at revision %d, below the source's %d", h.Revision, want.revision)
			}
			// Every key was written above the source's revision.
			if low := minModRevision(t, to); low <= want.revision {
				t.Errorf("a key on etcd has mod revision %d, not above the source's %d", low, want.revision)
			}
			want.revision = h.Revision
		case from == etcdLeg:
			// The etcd copy's revisions: history starts there.
			if h.Revision != want.revision || h.CompactRevision != want.revision {
				t.Errorf("%s is at revision %d (compacted %d), want %d (%d)", to, h.Revision, h.CompactRevision, want.revision, want.revision)
			}
		default:
			if h.Revision != want.revision || h.CompactRevision != want.compact {
				t.Errorf("%s is at revision %d (compacted %d), want %d (%d)", to, h.Revision, h.CompactRevision, want.revision, want.compact)
			}
			checkHistory(t, to, want)
		}
	}
	t.Logf("progress:\n%s", progress.String())
	if etcdLeg == "" {
		t.Log("the etcd leg was skipped: the chain was SQLite → PostgreSQL → MySQL → SQLite")
	}
	if !strings.Contains(progress.String(), "done: ") {
		t.Errorf("no progress line: %q", progress.String())
	}
	if rev := writeAfter(t, last); rev <= want.revision {
		t.Errorf("a write after the migration got revision %d, want above %d", rev, want.revision)
	}
}

// minModRevision is the lowest mod revision of the keys at `at`.
func minModRevision(t *testing.T, at string) int64 {
	t.Helper()
	src, err := datastore.OpenSource(testCtx(t), at)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	low := int64(math.MaxInt64)
	if err := src.Current(testCtx(t), func(kvs []datastore.KeyValue) error {
		for _, kv := range kvs {
			low = min(low, kv.ModRevision)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return low
}

// checkHistory reads the key fill overwrote at its revision before the
// overwrite: a SQL copy keeps the log, so it is still there.
func checkHistory(t *testing.T, dsn string, want *cluster) {
	t.Helper()
	s := openStore(t, dsn)
	res, err := s.Range(testCtx(t), sqlstore.RangeRequest{Key: []byte(want.oldKey), Revision: want.oldRev})
	if err != nil {
		t.Fatalf("%s: Range(%q at %d): %v", dsn, want.oldKey, want.oldRev, err)
	}
	if len(res.KVs) != 1 || !bytes.Equal(res.KVs[0].Value, want.oldValue) {
		t.Errorf("%s: %q at revision %d is not the value it had then", dsn, want.oldKey, want.oldRev)
	}
	if _, err := s.Range(testCtx(t), sqlstore.RangeRequest{Key: []byte(want.oldKey), Revision: want.compact - 1}); !errors.Is(err, sqlstore.ErrCompacted) {
		t.Errorf("%s: a read below the compaction gave %v, want ErrCompacted", dsn, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrate_RefusesNonEmpty: a target with data is refused unless
// forced, and a forced copy replaces what it held.
func TestMigrate_RefusesNonEmpty(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := testCtx(t)
		src, dst := backend(sqltest.SQLite).NewDSN(t), b.NewDSN(t)
		s := openStore(t, src)
		want := fill(t, s, 50)
		s.Close()
		d := openStore(t, dst)
		if _, _, err := d.Put(ctx, sqlstore.PutRequest{Key: []byte("/registry/pods/default/stale"), Value: []byte("old")}); err != nil {
			t.Fatal(err)
		}
		d.Close()
		if _, err := datastore.Migrate(ctx, src, dst, false, datastore.Options{}); !errors.Is(err, datastore.ErrNotEmpty) {
			t.Fatalf("Migrate into a non-empty target: %v, want ErrNotEmpty", err)
		}
		if _, err := datastore.Migrate(ctx, src, dst, true, datastore.Options{}); err != nil {
			t.Fatalf("Migrate --force: %v", err)
		}
		checkKeys(t, dst, want)
	})
}

// TestMigrate_EtcdSnapshot brings an etcd snapshot (what `etcdctl snapshot
// save` writes, checksum trailer included) into SQLite, and the etcd
// endpoint itself into PostgreSQL: keys, values, leases, and revisions
// that continue after etcd's.
func TestMigrate_EtcdSnapshot(t *testing.T) {
	ctx := testCtx(t)
	addr := startEtcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i < 300; i++ {
		key := "/registry/configmaps/default/cm-" + string(rune('a'+i%26)) + strings.Repeat("x", i%5) + "-" + strconv.Itoa(i)
		val := "\x00\xffvalue-" + strconv.Itoa(i)
		var opts []clientv3.OpOption
		if i%10 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := c.Put(ctx, key, val, opts...); err != nil {
			t.Fatal(err)
		}
		want[key] = val
	}
	// Compact, then overwrite one key: its old value stays readable at
	// midRev in the snapshot's history, not below the compaction.
	const histKey = "/registry/configmaps/default/history"
	if _, err := c.Put(ctx, histKey, "old"); err != nil {
		t.Fatal(err)
	}
	mid, err := c.Get(ctx, histKey)
	if err != nil {
		t.Fatal(err)
	}
	midRev := mid.Header.Revision
	if _, err := c.Compact(ctx, midRev-5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, histKey, "new"); err != nil {
		t.Fatal(err)
	}
	want[histKey] = "new"
	for i := 0; i < 20; i++ {
		key := "/registry/configmaps/default/cm-" + string(rune('a'+i%26)) + strings.Repeat("x", i%5) + "-" + strconv.Itoa(i)
		if _, err := c.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		delete(want, key)
	}
	head, err := c.Get(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	etcdRev := head.Header.Revision
	rc, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	f.Close()

	check := func(t *testing.T, dsn string) {
		got := map[string]string{}
		var leased int
		src, err := datastore.OpenSource(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		if h := src.Header(); h.Revision != etcdRev {
			t.Errorf("%s is at revision %d, want etcd's %d", dsn, h.Revision, etcdRev)
		}
		var leases int
		src.Leases(ctx, func(ls []datastore.LeaseRow) error { leases += len(ls); return nil })
		if err := src.Current(ctx, func(kvs []datastore.KeyValue) error {
			for _, kv := range kvs {
				got[string(kv.Key)] = string(kv.Value)
				if kv.Lease == int64(lease.ID) {
					leased++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if leases != 1 || leased != 28 {
			t.Errorf("%s: %d leases and %d keys on the lease, want 1 and 28", dsn, leases, leased)
		}
		if len(got) != len(want) {
			t.Errorf("%s holds %d keys, want %d", dsn, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q = %q, want %q", dsn, k, got[k], v)
				break
			}
		}
		if rev := writeAfter(t, dsn); rev != etcdRev+1 {
			t.Errorf("a write after the migration got revision %d, want %d", rev, etcdRev+1)
		}
	}
	t.Run("snapshot", func(t *testing.T) {
		dst := backend(sqltest.SQLite).NewDSN(t)
		if _, err := datastore.Migrate(ctx, snap, dst, false, datastore.Options{}); err != nil {
			t.Fatalf("Migrate(snapshot): %v", err)
		}
		// The snapshot's history came along, compaction included.
		s := openStore(t, dst)
		res, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte(histKey), Revision: midRev})
		if err != nil || len(res.KVs) != 1 || string(res.KVs[0].Value) != "old" {
			t.Errorf("%s at revision %d: %+v, %v; want \"old\"", histKey, midRev, res, err)
		}
		if _, compacted, err := s.Revisions(ctx); err != nil || compacted != midRev-5 {
			t.Errorf("compacted at %d (%v), want etcd's %d", compacted, err, midRev-5)
		}
		s.Close()
		check(t, dst)
	})
	t.Run("endpoint", func(t *testing.T) {
		dst := backend(sqltest.Postgres).NewDSN(t)
		if _, err := datastore.Migrate(ctx, "etcd://"+addr, dst, false, datastore.Options{}); err != nil {
			t.Fatalf("Migrate(etcd): %v", err)
		}
		// Only the current state: older revisions read as compacted.
		s := openStore(t, dst)
		if _, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte(histKey), Revision: midRev}); !errors.Is(err, sqlstore.ErrCompacted) {
			t.Errorf("%s at revision %d: %v, want ErrCompacted", histKey, midRev, err)
		}
		s.Close()
		check(t, dst)
	})
}

// TestMigrate_EtcdToEtcd copies one etcd into another (keys, values,
// leases, a revision at least the source's), refuses to copy into the
// non-empty one again, and replaces its contents with --force.
func TestMigrate_EtcdToEtcd(t *testing.T) {
	ctx := testCtx(t)
	src := backend(sqltest.SQLite).NewDSN(t)
	s := openStore(t, src)
	want := fill(t, s, 200)
	s.Close()
	a, b := "etcd://"+startEtcd(t), "etcd://"+startEtcd(t)
	if _, err := datastore.Migrate(ctx, src, a, false, datastore.Options{}); err != nil {
		t.Fatalf("Migrate(sqlite → etcd): %v", err)
	}
	if _, err := datastore.Migrate(ctx, a, b, false, datastore.Options{}); err != nil {
		t.Fatalf("Migrate(etcd → etcd): %v", err)
	}
	ha := checkKeys(t, a, want)
	if hb := checkKeys(t, b, want); hb.Revision < ha.Revision {
		t.Errorf("the copy is at revision %d, below the source's %d", hb.Revision, ha.Revision)
	}
	if _, err := datastore.Migrate(ctx, src, b, false, datastore.Options{}); !errors.Is(err, datastore.ErrNotEmpty) {
		t.Fatalf("Migrate into a non-empty etcd: %v, want ErrNotEmpty", err)
	}
	if _, err := datastore.Migrate(ctx, src, b, true, datastore.Options{}); err != nil {
		t.Fatalf("Migrate --force into etcd: %v", err)
	}
	checkKeys(t, b, want)
}
