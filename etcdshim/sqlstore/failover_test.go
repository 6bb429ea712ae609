package sqlstore_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
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

// TestStore_PostgresFailoverLostCommits: as TestStore_PostgresFailover,
// but the standby is asynchronous and the primary's WAL sender is paused
// while ten puts are acknowledged (and watched), so the promoted standby
// lacks them and hands their revisions out again. The stores that saw
// them fence them off: their watches end with ErrCompacted (410 Gone for
// a Kubernetes client, which relists) instead of going on past a gap, a
// watch from a lost revision is refused, and no revision a store saw is
// given to another write. The stores find the loss either way:
//   - the database behind them: they reach the new primary before
//     anything else writes there;
//   - the database past them already: another store, which never saw
//     the lost revisions, writes over them before the two can reach the
//     new primary (their DSN names it through a gate the test opens
//     afterwards); the log then differs from what they saw.
func TestStore_PostgresFailoverLostCommits(t *testing.T) {
	for _, c := range []struct {
		name       string
		otherFirst bool
	}{{"database behind", false}, {"database past", true}} {
		t.Run(c.name, func(t *testing.T) { testLostCommits(t, c.otherFirst) })
	}
}

func testLostCommits(t *testing.T, otherFirst bool) {
	primary, standby := sqltest.NewReplicatedPostgres(t, sqltest.Asynchronous)
	g := newGate(t, fmt.Sprintf("127.0.0.1:%d", standby.Port))
	if !otherFirst {
		g.open.Store(true)
	}
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,%s/sqlkube?sslmode=disable&target_session_attrs=read-write", primary.Port, g.addr())
	stores := []*sqlstore.Store{open(t, dsn), open(t, dsn)}
	var watches []*sqlstore.Watch
	var recs []*recorder
	for _, s := range stores {
		w, rec := watch(t, s, []byte("k/"), []byte("k0"), 1)
		watches, recs = append(watches, w), append(recs, rec)
	}
	for i := range 5 {
		put(t, stores[i%2], fmt.Sprintf("k/kept-%d", i), "v")
	}
	resume := primary.StopSending(t)
	defer resume()
	var lost []int64
	for i := range 10 {
		lost = append(lost, put(t, stores[i%2], fmt.Sprintf("k/lost-%d", i), "v"))
	}
	highest := lost[len(lost)-1]
	for _, w := range watches {
		waitSent(t, w, highest)
	}
	primary.Kill(t, true)
	standby.WaitReplayed(t)
	var standbyRev int64
	if err := standby.DB(t, "sqlkube").QueryRow(`SELECT val FROM kv_meta WHERE name = 'revision'`).Scan(&standbyRev); err != nil {
		t.Fatal(err)
	}
	if standbyRev >= lost[0] {
		t.Fatalf("the standby has revision %d, the first put it should lack was %d: nothing was lost", standbyRev, lost[0])
	}
	standby.Promote(t)

	// Another server, which never saw the lost revisions: it writes
	// over them before the two can reach the new primary, or after they
	// fenced them off.
	other := open(t, standby.DSN("sqlkube"))
	var reused []int64
	writeOther := func() {
		for i := range 15 {
			reused = append(reused, put(t, other, fmt.Sprintf("k/other-%d", i), "v"))
		}
		t.Logf("lost revisions %d-%d; the standby was at %d; another store wrote revisions %d-%d", lost[0], highest, standbyRev, reused[0], reused[len(reused)-1])
	}
	if otherFirst {
		writeOther()
		if reused[0] > highest {
			t.Fatalf("the new primary gave revision %d, above the lost %d: nothing was reused", reused[0], highest)
		}
		g.open.Store(true)
	}
	for i, w := range watches {
		select {
		case <-w.Done():
		case <-time.After(waitFor):
			t.Fatalf("store %d: the watch that saw the lost revisions is still open %v after the failover (sent up to %d)", i, waitFor, w.Sent())
		}
		checkErr(t, fmt.Sprintf("store %d's watch", i), w.Err(), sqlstore.ErrCompacted)
		recs[i].checkBatches(t)
	}
	if !otherFirst {
		writeOther()
		if reused[0] <= highest {
			t.Errorf("after the fence the new primary gave revision %d, not above the lost %d", reused[0], highest)
		}
	}
	for i, s := range stores {
		_, compacted, err := s.Revisions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("store %d: compacted at %d", i, compacted)
		if compacted <= highest {
			t.Errorf("store %d: compacted at %d, not above the lost %d", i, compacted, highest)
		}
		_, err = s.Watch(context.Background(), []byte("k/"), []byte("k0"), highest, func(sqlstore.WatchBatch) error { return nil })
		checkErr(t, fmt.Sprintf("store %d: a watch from the lost revision %d", i, highest), err, sqlstore.ErrCompacted)
		rev := put(t, s, fmt.Sprintf("k/after-%d", i), "v")
		if rev <= max(highest, compacted) {
			t.Errorf("store %d: a put after the fence got revision %d, not above the lost %d and the compaction %d", i, rev, highest, compacted)
		}
		for _, key := range []string{"k/lost-0", "k/lost-9"} {
			if kv := get(t, s, key); kv != nil {
				t.Errorf("store %d: %s is there (revision %d): the test lost nothing", i, key, kv.ModRevision)
			}
		}
		// Watches from above the compaction work, and see what comes
		// after.
		w2, rec2 := watch(t, s, []byte("k/"), []byte("k0"), compacted+1)
		after := put(t, other, fmt.Sprintf("k/later-%d", i), "v")
		waitSent(t, w2, after)
		if evs := rec2.events(); len(evs) == 0 || evs[len(evs)-1].KV.ModRevision != after {
			t.Errorf("store %d: a watch from above the compaction got %v, want the put at %d last", i, evStrings(evs), after)
		}
	}
}

// gate is a TCP proxy to a server that refuses connections (closes them
// at once) until open is set.
type gate struct {
	l      net.Listener
	target string
	open   atomic.Bool
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{l: l, target: target}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			for _, p := range [][2]net.Conn{{in, out}, {out, in}} {
				wg.Go(func() {
					_, _ = io.Copy(p[0], p[1])
					p[0].Close()
					p[1].Close()
				})
			}
		}
	})
	return g
}

func (g *gate) addr() string { return g.l.Addr().String() }
