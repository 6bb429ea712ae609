package sqlstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

func TestCompact(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s := open(t, dsn)
		db := rawDB(t, dsn)
		m := newModel()
		for i := range 10 {
			m.put(t, s, "k", fmt.Sprintf("v%d", i)) // 2..11
		}
		m.put(t, s, "d", "d")  // 12
		m.del(t, s, "d", "")   // 13
		m.put(t, s, "e", "e1") // 14
		m.put(t, s, "e", "e2") // 15
		m.del(t, s, "e", "")   // 16
		m.put(t, s, "f", "f")  // 17
		if got := countRows(t, db, "kv_log"); got != 16 {
			t.Fatalf("kv_log rows before compaction: got %d, want 16", got)
		}

		cur, err := s.Compact(ctx, 14)
		if err != nil || cur != 17 {
			t.Fatalf("Compact(14): revision %d, error %v; want 17, nil", cur, err)
		}
		checkRev(t, s, 17)
		if cur, compacted, err := s.Revisions(ctx); err != nil || cur != 17 || compacted != 14 {
			t.Errorf("Revisions: got %d, %d, %v; want 17, 14, nil", cur, compacted, err)
		}

		t.Run("reads", func(t *testing.T) {
			for _, rev := range []int64{1, 2, 6, 13} {
				_, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("k"), Revision: rev})
				checkErr(t, fmt.Sprintf("read at revision %d", rev), err, sqlstore.ErrCompacted)
			}
			_, err := s.Txn(ctx, &sqlstore.TxnRequest{Success: []sqlstore.Op{{Range: &sqlstore.RangeRequest{Key: []byte("k"), Revision: 13}}}})
			checkErr(t, "txn read at revision 13", err, sqlstore.ErrCompacted)
			for rev := int64(14); rev <= 17; rev++ {
				res := rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, Revision: rev})
				checkKVs(t, fmt.Sprintf("read at revision %d", rev), res.KVs, m.rangeAt(rev, "\x00", "\x00"))
			}
			checkKVs(t, "current", rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}}).KVs, m.rangeAt(17, "\x00", "\x00"))
		})

		t.Run("history removed", func(t *testing.T) {
			// Left: k@11 (latest at 14), e@14, e@15, e@16 (newer than 14),
			// f@17. Gone: k@2..10 (superseded), d@12 and its tombstone @13.
			if got := countRows(t, db, "kv_log"); got != 5 {
				t.Errorf("kv_log rows after Compact(14): got %d, want 5", got)
			}
		})

		t.Run("watch after compaction", func(t *testing.T) {
			w, rec := watch(t, s, []byte{0}, []byte{0}, 15)
			waitSent(t, w, 17)
			checkStrings(t, "events", evStrings(rec.events()), evStrings([]sqlstore.Event{
				putEv(kv("e", "e2", 14, 15, 2, 0), ptr(kv("e", "e1", 14, 14, 1, 0))),
				delEv("e", 16, ptr(kv("e", "e2", 14, 15, 2, 0))),
				putEv(kv("f", "f", 17, 17, 1, 0), nil),
			}))
		})

		t.Run("invalid revisions", func(t *testing.T) {
			for _, rev := range []int64{14, 5, 0} {
				_, err := s.Compact(ctx, rev)
				checkErr(t, fmt.Sprintf("Compact(%d) after Compact(14)", rev), err, sqlstore.ErrCompacted)
			}
			_, err := s.Compact(ctx, 18)
			checkErr(t, "Compact(18) at revision 17", err, sqlstore.ErrFutureRevision)
			if _, compacted, _ := s.Revisions(ctx); compacted != 14 {
				t.Errorf("compacted revision after refused compactions: %d, want 14", compacted)
			}
		})

		t.Run("to the current revision", func(t *testing.T) {
			if _, err := s.Compact(ctx, 17); err != nil {
				t.Fatal(err)
			}
			if got := countRows(t, db, "kv_log"); got != 2 {
				t.Errorf("kv_log rows after Compact(17): got %d, want 2 (k@11, f@17)", got)
			}
			checkKVs(t, "read at revision 17", rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, Revision: 17}).KVs, m.rangeAt(17, "\x00", "\x00"))
			_, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("k"), Revision: 16})
			checkErr(t, "read at revision 16", err, sqlstore.ErrCompacted)
			// Writing goes on from there.
			m.put(t, s, "k", "after")
			checkKV(t, "k", get(t, s, "k"), ptr(kv("k", "after", 2, 18, 11, 0)))
			checkKV(t, "k at 17", getAt(t, s, "k", 17), ptr(kv("k", "v9", 2, 11, 10, 0)))
		})
	})
}

// TestCompact_Size checks that compaction gives the space of removed history
// back: to the file system on SQLite at once, and on every database after
// Defragment.
func TestCompact_Size(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		const n, size = 60, 64 << 10 // 3.75 MiB of history
		val := make([]byte, size)
		var rev int64
		for range n {
			if _, err := rand.Read(val); err != nil { // incompressible
				t.Fatal(err)
			}
			rev = put(t, s, "big", string(val))
		}
		if err := s.Defragment(ctx); err != nil {
			t.Fatalf("Defragment: %v", err)
		}
		before, err := s.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if before < n*size {
			t.Fatalf("size with %d values of %d bytes: %d bytes", n, size, before)
		}
		if _, err := s.Compact(ctx, rev); err != nil {
			t.Fatal(err)
		}
		if b.Name == sqltest.SQLite {
			afterCompact, err := s.Size(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if afterCompact > before-(n-4)*size {
				t.Errorf("SQLite size: %d bytes before Compact, %d after; want most of %d bytes given back", before, afterCompact, (n-1)*size)
			}
		}
		// PostgreSQL's VACUUM FULL keeps deleted rows some transaction may
		// still see, and other databases on the server (other tests) can hold
		// that horizon back for a moment: defragment until it gives the space
		// back.
		eventually(t, "Defragment to give back most of the removed history", func() (bool, error) {
			if err := s.Defragment(ctx); err != nil {
				return false, err
			}
			after, err := s.Size(ctx)
			if err == nil && after > before-(n-4)*size {
				err = fmt.Errorf("size %d bytes before, %d after Compact and Defragment", before, after)
			}
			return err == nil, err
		})
		if got := get(t, s, "big"); got == nil || !bytes.Equal(got.Value, val) {
			t.Errorf("the latest value did not survive compaction")
		}
	})
}

func TestCompact_Automatic(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), CompactionInterval: 50 * time.Millisecond, CompactionRetention: 10})
		var rev int64
		for i := range 40 {
			rev = put(t, s, "k", fmt.Sprint(i))
		}
		eventually(t, "automatic compaction to keep 10 revisions", func() (bool, error) {
			_, compacted, err := s.Revisions(ctx)
			return compacted == rev-10, err
		})
		// put i is revision i+2: the 30th put (i 29) is revision 31, rev-10.
		checkKV(t, "k at the oldest kept revision", getAt(t, s, "k", rev-10), ptr(kv("k", "29", 2, rev-10, 30, 0)))
		_, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("k"), Revision: rev - 11})
		checkErr(t, "read below the retention", err, sqlstore.ErrCompacted)
	})
}
