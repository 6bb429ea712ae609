package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/migrations"
)

// written is what concurrent writers did: the key and value each revision
// wrote.
type written struct {
	mu    sync.Mutex
	byRev map[int64][2]string
	dups  []int64
}

func (w *written) add(rev int64, key, val string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.byRev[rev]; dup {
		w.dups = append(w.dups, rev)
	}
	w.byRev[rev] = [2]string{key, val}
}

// writeConcurrently runs workers goroutines per store, each putting n keys,
// and returns what each revision wrote.
func writeConcurrently(t *testing.T, stores []*sqlstore.Store, workers, n int) *written {
	t.Helper()
	w := &written{byRev: map[int64][2]string{}}
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*workers)
	for si, s := range stores {
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					key := fmt.Sprintf("c/%d/%d/%03d", si, g, i)
					val := fmt.Sprintf("v%d", i)
					_, rev, err := s.Put(context.Background(), sqlstore.PutRequest{Key: []byte(key), Value: []byte(val)})
					if err != nil {
						errs <- fmt.Errorf("put %s: %w", key, err)
						return
					}
					w.add(rev, key, val)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return w
}

// checkGapless fails the test unless revisions first..last were each
// written exactly once, and the watch delivered exactly those writes in
// order.
func checkGapless(t *testing.T, w *written, first, last int64, rec *recorder) {
	t.Helper()
	if len(w.dups) > 0 {
		t.Errorf("revisions returned to more than one write: %v", w.dups)
	}
	for rev := first; rev <= last; rev++ {
		if _, ok := w.byRev[rev]; !ok {
			t.Errorf("no write got revision %d", rev)
		}
	}
	if n := last - first + 1; int64(len(w.byRev)) != n {
		t.Errorf("%d distinct revisions for %d writes", len(w.byRev), n)
	}
	evs := rec.events()
	if int64(len(evs)) != last-first+1 {
		t.Errorf("watch delivered %d events, want %d", len(evs), last-first+1)
	}
	for i, ev := range evs {
		rev := first + int64(i)
		want := w.byRev[rev]
		if ev.KV.ModRevision != rev || string(ev.KV.Key) != want[0] || string(ev.KV.Value) != want[1] {
			t.Errorf("event %d: got %s, want %q=%q at revision %d", i, evString(ev), want[0], want[1], rev)
			break
		}
	}
	rec.checkBatches(t)
}

func TestStore_ConcurrentRevisions(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))
		w, rec := watch(t, s, []byte("c/"), []byte("c0"), 1)
		const workers, n = 8, 50
		written := writeConcurrently(t, []*sqlstore.Store{s}, workers, n)
		first, last := int64(2), int64(1+workers*n)
		checkRev(t, s, last)
		waitSent(t, w, last)
		checkGapless(t, written, first, last, rec)

		// Every past revision reads as the writes up to it.
		for _, rev := range []int64{1, 2, last / 3, last - 1, last} {
			if got := rng(t, s, sqlstore.RangeRequest{Key: []byte("c/"), End: []byte("c0"), Revision: rev, CountOnly: true}); got.Count != rev-1 {
				t.Errorf("keys at revision %d: got %d, want %d", rev, got.Count, rev-1)
			}
		}
	})
}

// TestStore_TwoInstances runs two stores on one database, as two sqlkube
// processes would: their revisions interleave without gaps, and each sees
// the other's writes in reads and watches.
func TestStore_TwoInstances(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s1, s2 := open(t, dsn), open(t, dsn)
		w1, rec1 := watch(t, s1, []byte("c/"), []byte("c0"), 1)
		w2, rec2 := watch(t, s2, []byte("c/"), []byte("c0"), 1)

		const workers, n = 4, 50
		written := writeConcurrently(t, []*sqlstore.Store{s1, s2}, workers, n)
		first, last := int64(2), int64(1+2*workers*n)
		total := last - first + 1
		checkRev(t, s1, last)
		checkRev(t, s2, last)
		waitSent(t, w1, last)
		waitSent(t, w2, last)
		t.Run("watch on the first", func(t *testing.T) { checkGapless(t, written, first, last, rec1) })
		t.Run("watch on the second", func(t *testing.T) { checkGapless(t, written, first, last, rec2) })

		all := sqlstore.RangeRequest{Key: []byte("c/"), End: []byte("c0")}
		r1, r2 := rng(t, s1, all), rng(t, s2, all)
		if r1.Count != total || r2.Count != total {
			t.Errorf("keys: %d through the first store, %d through the second; want %d", r1.Count, r2.Count, total)
		}
		checkKVs(t, "the two stores' reads", r2.KVs, r1.KVs)

		t.Run("each sees the other", func(t *testing.T) {
			lw1, lrec1 := watch(t, s1, []byte("x/"), []byte("x0"), 0)
			lw2, lrec2 := watch(t, s2, []byte("x/"), []byte("x0"), 0)
			r := put(t, s1, "x/1", "from 1")
			checkKV(t, "read through the other store", get(t, s2, "x/1"), ptr(kv("x/1", "from 1", r, r, 1, 0)))
			waitSent(t, lw2, r)
			checkStrings(t, "watch on the other store", evStrings(lrec2.events()), evStrings([]sqlstore.Event{putEv(kv("x/1", "from 1", r, r, 1, 0), nil)}))

			res, err := s2.Txn(ctx, &sqlstore.TxnRequest{
				Compare: []sqlstore.Compare{cmpNum("x/1", sqlstore.CompareMod, sqlstore.CompareEqual, r)},
				Success: []sqlstore.Op{putOp("x/1", "from 2"), putOp("x/2", "from 2")},
			})
			if err != nil || !res.Succeeded || res.Revision != r+1 {
				t.Fatalf("txn through the second store on a key of the first: %+v, %v", res, err)
			}
			waitSent(t, lw1, r+1)
			checkStrings(t, "watch on the first store", evStrings(lrec1.events()), evStrings([]sqlstore.Event{
				putEv(kv("x/1", "from 1", r, r, 1, 0), nil),
				putEv(kv("x/1", "from 2", r, r+1, 2, 0), ptr(kv("x/1", "from 1", r, r, 1, 0))),
				putEv(kv("x/2", "from 2", r+1, r+1, 1, 0), nil),
			}))
		})

		t.Run("compare-and-swap through both", func(t *testing.T) {
			start := put(t, s1, "counter", "0")
			total := casIncrements(t, []*sqlstore.Store{s1, s2}, 3, 15)
			want := ptr(kv("counter", strconv.Itoa(total), start, start+int64(total), int64(total+1), 0))
			checkKV(t, "counter through the first store", get(t, s1, "counter"), want)
			checkKV(t, "counter through the second store", get(t, s2, "counter"), want)
		})

		t.Run("leases are shared", func(t *testing.T) {
			l := grant(t, s1, 0, 60)
			putLeased(t, s1, "x/leased", "v", l.ID)
			ttl := timeToLive(t, s2, l.ID, true)
			checkStrings(t, "keys seen through the other store", bytesStrings(ttl.Keys), []string{"x/leased"})
			if _, err := s2.LeaseKeepAlive(ctx, l.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := s2.LeaseRevoke(ctx, l.ID); err != nil {
				t.Fatal(err)
			}
			checkKV(t, "leased key after revoke through the other store", get(t, s1, "x/leased"), nil)
			_, err := s1.LeaseTimeToLive(ctx, l.ID, false)
			checkErr(t, "revoked lease through the first store", err, sqlstore.ErrLeaseNotFound)
		})

		t.Run("compaction is shared", func(t *testing.T) {
			cur := currentRev(t, s1)
			if _, err := s1.Compact(ctx, cur-1); err != nil {
				t.Fatal(err)
			}
			_, err := s2.Range(ctx, sqlstore.RangeRequest{Key: []byte("c/"), End: []byte("c0"), Revision: cur - 2})
			checkErr(t, "read below the other store's compaction", err, sqlstore.ErrCompacted)
			_, err = s2.Compact(ctx, cur-1)
			checkErr(t, "second compaction through the other store", err, sqlstore.ErrCompacted)
		})
	})
}

func TestStore_Restart(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s := open(t, dsn)
		m := newModel()
		for i := range 5 {
			m.put(t, s, fmt.Sprintf("k%d", i%3), fmt.Sprint(i)) // 2..6
		}
		m.del(t, s, "k1", "")  // 7
		m.put(t, s, "k3", "3") // 8
		if _, err := s.Compact(ctx, 4); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s = open(t, dsn)
		if cur, compacted, err := s.Revisions(ctx); err != nil || cur != 8 || compacted != 4 {
			t.Fatalf("Revisions after reopen: %d, %d, %v; want 8, 4, nil", cur, compacted, err)
		}
		for rev := int64(4); rev <= 8; rev++ {
			checkKVs(t, fmt.Sprintf("keys at revision %d", rev), rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, Revision: rev}).KVs, m.rangeAt(rev, "\x00", "\x00"))
		}
		_, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("k0"), Revision: 3})
		checkErr(t, "read below the compaction after reopen", err, sqlstore.ErrCompacted)

		w, rec := watch(t, s, []byte{0}, []byte{0}, 7)
		m.put(t, s, "k1", "back") // 9
		waitSent(t, w, 9)
		checkStrings(t, "events across the restart", evStrings(rec.events()), evStrings([]sqlstore.Event{
			delEv("k1", 7, ptr(kv("k1", "4", 3, 6, 2, 0))),
			putEv(kv("k3", "3", 8, 8, 1, 0), nil),
			putEv(kv("k1", "back", 9, 9, 1, 0), nil),
		}))
		checkKVs(t, "keys after writing on", rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}}).KVs, m.rangeAt(9, "\x00", "\x00"))
	})
}

func TestStore_Migrations(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		d, err := sqlstore.Dialect(dsn)
		if err != nil {
			t.Fatal(err)
		}
		latest, err := migrations.Latest(d)
		if err != nil {
			t.Fatal(err)
		}
		s := open(t, dsn)
		if s.DialectName() != b.Name {
			t.Errorf("DialectName: got %q, want %q", s.DialectName(), b.Name)
		}
		put(t, s, "k", "v")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		v, dirty, err := sqlstore.SchemaVersion(ctx, dsn)
		if err != nil || v != latest || dirty {
			t.Fatalf("SchemaVersion: %d, dirty %v, %v; want %d, clean", v, dirty, err, latest)
		}
		// Migrating again changes nothing.
		if v, err := sqlstore.Migrate(ctx, dsn); err != nil || v != latest {
			t.Fatalf("Migrate: %d, %v; want %d", v, err, latest)
		}
		s = open(t, dsn)
		checkKV(t, "k after migrating again", get(t, s, "k"), ptr(kv("k", "v", 2, 2, 1, 0)))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		// Migrating down removes everything; the next Open starts afresh.
		if err := sqlstore.MigrateDown(ctx, dsn); err != nil {
			t.Fatalf("MigrateDown: %v", err)
		}
		if v, dirty, err := sqlstore.SchemaVersion(ctx, dsn); err != nil || v != 0 || dirty {
			t.Fatalf("SchemaVersion after MigrateDown: %d, dirty %v, %v; want 0, clean", v, dirty, err)
		}
		s = open(t, dsn)
		checkRev(t, s, 1)
		checkKV(t, "k after MigrateDown", get(t, s, "k"), nil)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		// A newer sqlkube migrated the database: refuse it.
		db := rawDB(t, dsn)
		if _, err := db.Exec(fmt.Sprintf("UPDATE schema_migrations SET version = %d", latest+1)); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s2, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: zerolog.Nop()})
		if err == nil {
			s2.Close()
		}
		if !errors.Is(err, migrations.ErrSchemaTooNew) {
			t.Errorf("Open of a newer schema: got %v, want ErrSchemaTooNew", err)
		}
		if _, err := sqlstore.Migrate(ctx, dsn); !errors.Is(err, migrations.ErrSchemaTooNew) {
			t.Errorf("Migrate of a newer schema: got %v, want ErrSchemaTooNew", err)
		}
		if err := sqlstore.MigrateDown(ctx, dsn); !errors.Is(err, migrations.ErrSchemaTooNew) {
			t.Errorf("MigrateDown of a newer schema: got %v, want ErrSchemaTooNew", err)
		}
	})
}

// TestMigrate_Concurrent: servers that start together on a new database
// migrate it together: every one succeeds, none takes the version another
// is writing for a migration that failed half-way (dirty).
func TestMigrate_Concurrent(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		if b.Name == sqltest.SQLite {
			t.Skip("one process writes a SQLite file")
		}
		ctx := context.Background()
		for round := range 3 {
			dsn := b.NewDSN(t)
			errs := make(chan error, 6)
			var wg sync.WaitGroup
			for range cap(errs) {
				wg.Go(func() {
					_, err := sqlstore.Migrate(ctx, dsn)
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("round %d: Migrate beside others: %v", round, err)
				}
			}
		}
	})
}
