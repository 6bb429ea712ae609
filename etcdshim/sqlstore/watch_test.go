package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// waitEntered waits until a gated recorder's watch is inside deliver.
func waitEntered(t *testing.T, r *recorder) {
	t.Helper()
	select {
	case <-r.entered:
	case <-time.After(waitFor):
		t.Fatalf("watch did not deliver within %s", waitFor)
	}
}

func TestWatch_Events(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s := open(t, dsn)
		// An empty store is at revision 1; the writes are revisions 2..8.
		put(t, s, "a/1", "1")
		put(t, s, "a/2", "2")
		put(t, s, "b", "b")
		put(t, s, "a/1", "1b")
		del(t, s, "a/2", "")
		txn(t, s, sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("a/3", "3"), delOp("a/1", ""), putOp("c", "c")}})
		put(t, s, "a/3", "3b")

		wantPrefix := []sqlstore.Event{
			putEv(kv("a/1", "1", 2, 2, 1, 0), nil),
			putEv(kv("a/2", "2", 3, 3, 1, 0), nil),
			putEv(kv("a/1", "1b", 2, 5, 2, 0), ptr(kv("a/1", "1", 2, 2, 1, 0))),
			delEv("a/2", 6, ptr(kv("a/2", "2", 3, 3, 1, 0))),
			putEv(kv("a/3", "3", 7, 7, 1, 0), nil),
			delEv("a/1", 7, ptr(kv("a/1", "1b", 2, 5, 2, 0))),
			putEv(kv("a/3", "3b", 7, 8, 2, 0), ptr(kv("a/3", "3", 7, 7, 1, 0))),
		}
		cases := []struct {
			name     string
			key, end string
			start    int64
			want     []sqlstore.Event
		}{
			{"prefix from 1", "a/", "a0", 1, wantPrefix},
			{"prefix from 2", "a/", "a0", 2, wantPrefix},
			{"prefix from 5", "a/", "a0", 5, wantPrefix[2:]},
			{"prefix from 7", "a/", "a0", 7, wantPrefix[4:]},
			{"single key", "a/1", "", 1, []sqlstore.Event{wantPrefix[0], wantPrefix[2], wantPrefix[5]}},
			{"from key", "b", "\x00", 1, []sqlstore.Event{putEv(kv("b", "b", 4, 4, 1, 0), nil), putEv(kv("c", "c", 7, 7, 1, 0), nil)}},
			{"everything from 6", "\x00", "\x00", 6, []sqlstore.Event{wantPrefix[3], wantPrefix[4], wantPrefix[5], putEv(kv("c", "c", 7, 7, 1, 0), nil), wantPrefix[6]}},
		}
		check := func(t *testing.T, s *sqlstore.Store) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					var end []byte
					if c.end != "" {
						end = []byte(c.end)
					}
					w, rec := watch(t, s, []byte(c.key), end, c.start)
					waitSent(t, w, 8)
					checkStrings(t, "events", evStrings(rec.events()), evStrings(c.want))
					rec.checkBatches(t)
					if w.Sent() < 8 {
						t.Errorf("Sent: got %d, want at least 8", w.Sent())
					}
				})
			}
		}
		// The store that wrote serves the watches from memory.
		t.Run("memory", func(t *testing.T) { check(t, s) })
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// A store opened afterwards has nothing in memory: it reads the log.
		s2 := open(t, dsn)
		t.Run("log", func(t *testing.T) { check(t, s2) })

		t.Run("live", func(t *testing.T) {
			w, rec := watch(t, s2, []byte("a/"), []byte("a0"), 0)
			if w.Sent() != 8 {
				t.Errorf("Sent of a new watch at revision 8: got %d, want 8", w.Sent())
			}
			put(t, s2, "a/4", "4") // 9
			put(t, s2, "b", "b2")  // 10
			_, rev, err := s2.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte("a/"), End: []byte("a0")})
			if err != nil || rev != 11 {
				t.Fatalf("delete a/: revision %d, error %v", rev, err)
			}
			waitSent(t, w, 11)
			checkStrings(t, "events", evStrings(rec.events()), evStrings([]sqlstore.Event{
				putEv(kv("a/4", "4", 9, 9, 1, 0), nil),
				delEv("a/3", 11, ptr(kv("a/3", "3b", 7, 8, 2, 0))),
				delEv("a/4", 11, ptr(kv("a/4", "4", 9, 9, 1, 0))),
			}))
			rec.mu.Lock()
			last := rec.batches[len(rec.batches)-1]
			rec.mu.Unlock()
			if len(last.Events) != 2 || last.Revision != 11 {
				t.Errorf("one revision's events come in one batch: last batch has %d events at revision %d, want 2 at 11", len(last.Events), last.Revision)
			}
		})

		t.Run("future start", func(t *testing.T) {
			w, rec := watch(t, s2, []byte("f"), nil, 14)
			for i := range 5 {
				put(t, s2, "f", fmt.Sprint(i)) // 12..16
			}
			waitSent(t, w, 16)
			evs := rec.events()
			if len(evs) != 3 || evs[0].KV.ModRevision != 14 || evs[2].KV.ModRevision != 16 {
				t.Errorf("watch from 14: got %s, want the puts at 14, 15, 16", evStrings(evs))
			}
		})
	})
}

func TestWatch_Progress(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))
		put(t, s, "x", "0") // 2
		w, rec := watch(t, s, []byte("a/"), []byte("a0"), 0)
		if w.Sent() != 2 {
			t.Errorf("Sent of a new watch: got %d, want 2", w.Sent())
		}
		var rev int64
		for i := range 10 {
			rev = put(t, s, "x", fmt.Sprint(i))
		}
		// Nothing matched, yet the watch says it is up to date.
		waitSent(t, w, rev)
		if got := w.Sent(); got != rev {
			t.Errorf("Sent: got %d, want %d", got, rev)
		}
		if evs := rec.events(); len(evs) != 0 {
			t.Errorf("events of other keys delivered: %s", evStrings(evs))
		}
		rev = put(t, s, "a/1", "1")
		waitSent(t, w, rev)
		checkStrings(t, "events", evStrings(rec.events()), evStrings([]sqlstore.Event{putEv(kv("a/1", "1", rev, rev, 1, 0), nil)}))

		// WaitSent honours its context for a revision not yet written.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := w.WaitSent(ctx, rev+100); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitSent of a future revision: got %v, want context.DeadlineExceeded", err)
		}
	})
}

// TestWatch_SlowConsumer holds a watch in deliver while many revisions are
// written, past what the watch cache holds: it must still get every event,
// in order, from the log.
func TestWatch_SlowConsumer(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), WatchCacheSize: 16})
		start := currentRev(t, s) + 1
		w, rec := watchWith(t, s, []byte("s/"), []byte("s0"), start, gated())
		fast, fastRec := watch(t, s, []byte("s/"), []byte("s0"), start)

		var (
			want    []sqlstore.Event
			lastRev int64
		)
		last := map[string]sqlstore.KeyValue{}
		write := func(i int) {
			key := fmt.Sprintf("s/%d", i%7)
			if i%5 == 4 {
				key = fmt.Sprintf("other/%d", i)
			}
			val := fmt.Sprintf("v%d", i)
			rev := put(t, s, key, val)
			lastRev = rev
			if key[0] != 's' {
				return
			}
			cur := kv(key, val, rev, rev, 1, 0)
			var prev *sqlstore.KeyValue
			if p, ok := last[key]; ok {
				cur.CreateRevision, cur.Version = p.CreateRevision, p.Version+1
				prev = ptr(p)
			}
			last[key] = cur
			want = append(want, putEv(cur, prev))
		}
		write(0)
		waitEntered(t, rec) // the watch holds the first write and is stuck
		const n = 300
		for i := 1; i < n; i++ {
			write(i)
		}
		if got := w.Sent(); got != start-1 {
			t.Fatalf("Sent of the blocked watch: got %d, want %d (delivered %s)", got, start-1, evStrings(rec.events()))
		}
		waitSent(t, fast, lastRev)
		rec.open()
		waitSent(t, w, lastRev)
		checkStrings(t, "events of the slow watch", evStrings(rec.events()), evStrings(want))
		rec.checkBatches(t)
		checkStrings(t, "events of the fast watch", evStrings(fastRec.events()), evStrings(want))
		fastRec.checkBatches(t)
		if err := w.Err(); err != nil {
			t.Errorf("Err: %v", err)
		}
	})
}

func TestWatch_Compacted(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), WatchCacheSize: 16})

		t.Run("start at or below the compacted revision", func(t *testing.T) {
			for i := range 10 {
				put(t, s, "k", fmt.Sprint(i)) // 2..11
			}
			if _, err := s.Compact(ctx, 6); err != nil {
				t.Fatal(err)
			}
			for _, start := range []int64{1, 5, 6} {
				w, err := s.Watch(ctx, []byte("k"), nil, start, func(sqlstore.WatchBatch) error { return nil })
				if w != nil {
					w.Cancel()
				}
				if !errors.Is(err, sqlstore.ErrCompacted) {
					t.Errorf("watch from %d: got error %v, want ErrCompacted", start, err)
					continue
				}
				var ce *sqlstore.CompactedError
				if !errors.As(err, &ce) || ce.CompactRevision != 6 {
					t.Errorf("watch from %d: got %#v, want a *CompactedError at revision 6", start, err)
				}
			}
			w, rec := watch(t, s, []byte("k"), nil, 7)
			waitSent(t, w, 11)
			evs := rec.events()
			if len(evs) != 5 || evs[0].KV.ModRevision != 7 {
				t.Fatalf("watch from 7: got %s, want the puts at 7..11", evStrings(evs))
			}
			// The previous version of the first event is the one the
			// compaction kept.
			checkKV(t, "PrevKV of the first event after the compaction", evs[0].PrevKV, ptr(kv("k", "4", 2, 6, 5, 0)))
		})

		t.Run("compacted while behind", func(t *testing.T) {
			start := currentRev(t, s) + 1
			w, rec := watchWith(t, s, []byte("w"), nil, start, gated())
			put(t, s, "w", "first")
			waitEntered(t, rec) // holds one revision
			var rev int64
			for i := range 50 {
				rev = put(t, s, "w", fmt.Sprint(i))
			}
			if _, err := s.Compact(ctx, rev-5); err != nil {
				t.Fatal(err)
			}
			rec.open()
			select {
			case <-w.Done():
			case <-time.After(waitFor):
				t.Fatalf("watch behind a compaction did not end (sent %d)", w.Sent())
			}
			if err := w.Err(); !errors.Is(err, sqlstore.ErrCompacted) {
				t.Errorf("Err: got %v, want ErrCompacted", err)
			}
			if got := w.CompactRevision(); got != rev-5 {
				t.Errorf("CompactRevision: got %d, want %d", got, rev-5)
			}
			if evs := rec.events(); len(evs) != 1 || evs[0].KV.ModRevision != start {
				t.Errorf("delivered: %s, want only the first put", evStrings(evs))
			}
		})
	})
}

func TestWatch_End(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s := open(t, dsn)

		t.Run("cancel", func(t *testing.T) {
			w, rec := watch(t, s, []byte("k"), nil, 0)
			w.Cancel()
			select {
			case <-w.Done():
			default:
				t.Fatal("Done not closed after Cancel returned")
			}
			if err := w.Err(); err != nil {
				t.Errorf("Err after Cancel: %v", err)
			}
			put(t, s, "k", "after cancel")
			if evs := rec.events(); len(evs) != 0 {
				t.Errorf("cancelled watch delivered %s", evStrings(evs))
			}
		})

		t.Run("context", func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			w, err := s.Watch(wctx, []byte("k"), nil, 0, func(sqlstore.WatchBatch) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			select {
			case <-w.Done():
			case <-time.After(waitFor):
				t.Fatal("watch did not end with its context")
			}
		})

		t.Run("deliver fails", func(t *testing.T) {
			calls := 0
			w, err := s.Watch(ctx, []byte("k"), nil, 0, func(sqlstore.WatchBatch) error {
				calls++
				return errors.New("client gone")
			})
			if err != nil {
				t.Fatal(err)
			}
			put(t, s, "k", "1")
			put(t, s, "k", "2")
			select {
			case <-w.Done():
			case <-time.After(waitFor):
				t.Fatal("watch did not end when deliver failed")
			}
			if calls != 1 {
				t.Errorf("deliver called %d times, want 1", calls)
			}
		})

		t.Run("store closed", func(t *testing.T) {
			s2 := open(t, dsn)
			w, err := s2.Watch(ctx, []byte("k"), nil, 0, func(sqlstore.WatchBatch) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w.Done():
			case <-time.After(waitFor):
				t.Fatal("watch did not end when its store closed")
			}
			if _, _, err := s2.Put(ctx, sqlstore.PutRequest{Key: []byte("k")}); !errors.Is(err, sqlstore.ErrClosed) {
				t.Errorf("Put on a closed store: got %v, want ErrClosed", err)
			}
		})
	})
}

// TestWatch_LargeRevision writes one revision with more events than the
// watch cache holds: watches get it whole, in one batch.
func TestWatch_LargeRevision(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), WatchCacheSize: 16})
		put(t, s, "before", "b") // 2
		w, rec := watch(t, s, []byte("big/"), []byte("big0"), 0)
		var ops []sqlstore.Op
		var want []sqlstore.Event
		for i := range 40 {
			key := fmt.Sprintf("big/%02d", i)
			ops = append(ops, putOp(key, "v"))
			want = append(want, putEv(kv(key, "v", 3, 3, 1, 0), nil))
		}
		ops = append(ops, putOp("other", "o"))
		if res := txn(t, s, sqlstore.TxnRequest{Success: ops}); res.Revision != 3 {
			t.Fatalf("txn revision: got %d, want 3", res.Revision)
		}
		put(t, s, "after", "a") // 4
		waitSent(t, w, 4)
		checkStrings(t, "events", evStrings(rec.events()), evStrings(want))
		rec.mu.Lock()
		batches := len(rec.batches)
		rec.mu.Unlock()
		if batches != 1 {
			t.Errorf("one revision came in %d batches, want 1", batches)
		}

		// A watch from before it, served from the log, gets it whole too.
		w2, rec2 := watch(t, s, []byte("big/"), []byte("big0"), 1)
		waitSent(t, w2, 4)
		checkStrings(t, "events from the log", evStrings(rec2.events()), evStrings(want))
	})
}
