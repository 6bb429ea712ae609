package sqlstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestStore_PostgresFailover: two stores on a private primary and its
// synchronous standby, through one DSN that names the standby first and
// says nothing of target_session_attrs. The stores migrate and write on
// the primary (the DSN gets read-write: a store that kept the first host
// that answered would be on the standby, and fail to migrate). The
// primary's postmaster is killed (SIGKILL) and the standby promoted; the
// stores, left alone, write on it, every revision they acknowledged
// before is there, new revisions come after them, both watches deliver
// every write in order without a gap, and each store's LISTEN connection
// is on the new primary.
func TestStore_PostgresFailover(t *testing.T) {
	primary, standby := sqltest.NewReplicatedPostgres(t, sqltest.Synchronous)
	dsn := strings.TrimSuffix(sqltest.MultiHostDSN("sqlkube", standby, primary), "&target_session_attrs=read-write")
	stores := []*sqlstore.Store{open(t, dsn), open(t, dsn)}
	w0, rec0 := watch(t, stores[0], []byte("k/"), []byte("k0"), 1)
	w1, rec1 := watch(t, stores[1], []byte("k/"), []byte("k0"), 1)

	type write struct {
		key string
		rev int64
	}
	var acked []write
	for i := range 20 {
		key := fmt.Sprintf("k/before-%02d", i)
		acked = append(acked, write{key, put(t, stores[i%2], key, "v")})
	}
	before := acked[len(acked)-1].rev
	waitSent(t, w0, before)
	waitSent(t, w1, before)

	took := primary.Kill(t, false)
	t.Logf("the primary's processes were gone %v after SIGKILL", took.Round(time.Millisecond))
	// No primary: nothing is acknowledged.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, _, err := stores[0].Put(ctx, sqlstore.PutRequest{Key: []byte("k/nobody"), Value: []byte("v")})
	cancel()
	if err == nil {
		t.Fatal("a put was acknowledged while there was no primary")
	}
	promoted := time.Now()
	standby.Promote(t)
	t.Logf("promoted in %v", time.Since(promoted).Round(time.Millisecond))

	for i, s := range stores {
		key := fmt.Sprintf("k/after-%d", i)
		var rev int64
		eventually(t, "a put through store "+fmt.Sprint(i)+" after the failover", func() (bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var err error
			_, rev, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte(key), Value: []byte("v")})
			return err == nil, err
		})
		if rev <= before {
			t.Errorf("%s got revision %d after the failover, not above %d acknowledged before it", key, rev, before)
		}
		acked = append(acked, write{key, rev})
	}
	t.Logf("writes again %v after the promotion", time.Since(promoted).Round(time.Millisecond))

	last := acked[len(acked)-1].rev
	for i, s := range stores {
		for _, w := range acked {
			if kv := get(t, s, w.key); kv == nil || kv.ModRevision != w.rev {
				t.Errorf("store %d: %s is %v, acknowledged at revision %d", i, w.key, kv, w.rev)
			}
		}
	}
	for i, wr := range []struct {
		w   *sqlstore.Watch
		rec *recorder
	}{{w0, rec0}, {w1, rec1}} {
		waitSent(t, wr.w, last)
		wr.rec.checkBatches(t)
		var got, want []string
		for _, ev := range wr.rec.events() {
			got = append(got, fmt.Sprintf("%s@%d", ev.KV.Key, ev.KV.ModRevision))
		}
		for _, w := range acked {
			want = append(want, fmt.Sprintf("%s@%d", w.key, w.rev))
		}
		checkStrings(t, fmt.Sprintf("watch on store %d", i), got, want)
	}

	// Both LISTEN connections came back, on the new primary.
	db := rawDB(t, standby.DSN("sqlkube"))
	eventually(t, "both stores to LISTEN on the new primary", func() (bool, error) {
		var n int
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = 'sqlkube' AND query ILIKE 'LISTEN %'`).Scan(&n)
		return n == len(stores), err
	})
}
