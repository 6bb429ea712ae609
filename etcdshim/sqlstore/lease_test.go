package sqlstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

func grant(t *testing.T, s *sqlstore.Store, id, ttl int64) *sqlstore.Lease {
	t.Helper()
	l, err := s.LeaseGrant(context.Background(), id, ttl)
	if err != nil {
		t.Fatalf("LeaseGrant(%d, %d): %v", id, ttl, err)
	}
	return l
}

func putLeased(t *testing.T, s *sqlstore.Store, key, val string, lease int64) int64 {
	t.Helper()
	_, rev, err := s.Put(context.Background(), sqlstore.PutRequest{Key: []byte(key), Value: []byte(val), Lease: lease})
	if err != nil {
		t.Fatalf("Put(%q, lease %d): %v", key, lease, err)
	}
	return rev
}

func timeToLive(t *testing.T, s *sqlstore.Store, id int64, keys bool) *sqlstore.Lease {
	t.Helper()
	l, err := s.LeaseTimeToLive(context.Background(), id, keys)
	if err != nil {
		t.Fatalf("LeaseTimeToLive(%d): %v", id, err)
	}
	return l
}

func TestLease_Grant(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))

		l := grant(t, s, 100, 30)
		if l.ID != 100 || l.TTL != 30 || l.Remaining != 30 {
			t.Errorf("grant with client ID: got %+v, want ID 100, TTL and remaining 30", l)
		}
		_, err := s.LeaseGrant(ctx, 100, 60)
		checkErr(t, "grant of an existing ID", err, sqlstore.ErrLeaseExists)
		_, err = s.LeaseGrant(ctx, 0, sqlstore.MaxLeaseTTL+1)
		checkErr(t, "grant of a too large TTL", err, sqlstore.ErrLeaseTTLTooBig)

		a, b2 := grant(t, s, 0, 10), grant(t, s, 0, 10)
		if a.ID <= 0 || b2.ID <= 0 || a.ID == b2.ID || a.ID == 100 || b2.ID == 100 {
			t.Errorf("server-chosen IDs %d and %d: want positive, distinct, and not 100", a.ID, b2.ID)
		}
		// A grant does not write a revision.
		checkRev(t, s, 1)

		ids, err := s.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{100, a.ID, b2.ID}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("Leases: got %v, want %v", ids, want)
		}

		for _, id := range []int64{555, -1} {
			_, err = s.LeaseTimeToLive(ctx, id, true)
			checkErr(t, "time-to-live of an unknown lease", err, sqlstore.ErrLeaseNotFound)
			_, err = s.LeaseKeepAlive(ctx, id)
			checkErr(t, "keepalive of an unknown lease", err, sqlstore.ErrLeaseNotFound)
			_, err = s.LeaseRevoke(ctx, id)
			checkErr(t, "revoke of an unknown lease", err, sqlstore.ErrLeaseNotFound)
		}
	})
}

func TestLease_TimeToLiveAndKeepAlive(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		l := grant(t, s, 7, 60)
		putLeased(t, s, "b", "1", l.ID)
		putLeased(t, s, "a", "1", l.ID)
		putLeased(t, s, "a", "2", l.ID)
		putLeased(t, s, "moved", "1", l.ID)
		put(t, s, "moved", "2") // no lease any more
		put(t, s, "c", "free")

		ttl := timeToLive(t, s, l.ID, true)
		if ttl.ID != 7 || ttl.TTL != 60 || ttl.Remaining < 59 || ttl.Remaining > 60 {
			t.Errorf("time-to-live: got %+v, want ID 7, TTL 60, remaining 59..60", ttl)
		}
		checkStrings(t, "keys", bytesStrings(ttl.Keys), []string{"a", "b"})
		if ttl := timeToLive(t, s, l.ID, false); ttl.Keys != nil {
			t.Errorf("time-to-live without keys listed %q", ttl.Keys)
		}

		// Keepalives in quick succession (often within one millisecond) all
		// succeed.
		for i := range 20 {
			got, err := s.LeaseKeepAlive(ctx, l.ID)
			if err != nil || got != 60 {
				t.Fatalf("keepalive %d: got TTL %d, error %v; want 60, nil", i, got, err)
			}
		}
		if ttl := timeToLive(t, s, l.ID, false); ttl.Remaining != 60 {
			t.Errorf("remaining after keepalive: got %d, want 60", ttl.Remaining)
		}
	})
}

func TestLease_Revoke(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		l := grant(t, s, 0, 60)
		other := grant(t, s, 0, 60)
		putLeased(t, s, "l/1", "1", l.ID)   // 2
		putLeased(t, s, "l/2", "2", l.ID)   // 3
		putLeased(t, s, "l/3", "3", l.ID)   // 4
		put(t, s, "free", "f")              // 5
		putLeased(t, s, "o", "o", other.ID) // 6
		putLeased(t, s, "l/2", "2b", l.ID)  // 7
		w, rec := watch(t, s, []byte{0}, []byte{0}, 8)

		rev, err := s.LeaseRevoke(ctx, l.ID)
		if err != nil || rev != 8 {
			t.Fatalf("LeaseRevoke: revision %d, error %v; want 8, nil", rev, err)
		}
		checkRev(t, s, 8)
		waitSent(t, w, 8)
		checkStrings(t, "events of the revoke", evStrings(rec.events()), evStrings([]sqlstore.Event{
			delEv("l/1", 8, ptr(kv("l/1", "1", 2, 2, 1, l.ID))),
			delEv("l/2", 8, ptr(kv("l/2", "2b", 3, 7, 2, l.ID))),
			delEv("l/3", 8, ptr(kv("l/3", "3", 4, 4, 1, l.ID))),
		}))
		checkStrings(t, "keys left", keyStrings(rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}}).KVs), []string{"free", "o"})
		if got := rng(t, s, sqlstore.RangeRequest{Key: []byte("l/"), End: []byte("l0"), Revision: 7}); got.Count != 3 {
			t.Errorf("leased keys before the revoke: got %d, want 3", got.Count)
		}

		_, err = s.LeaseTimeToLive(ctx, l.ID, false)
		checkErr(t, "time-to-live of a revoked lease", err, sqlstore.ErrLeaseNotFound)
		_, err = s.LeaseKeepAlive(ctx, l.ID)
		checkErr(t, "keepalive of a revoked lease", err, sqlstore.ErrLeaseNotFound)
		_, err = s.LeaseRevoke(ctx, l.ID)
		checkErr(t, "second revoke", err, sqlstore.ErrLeaseNotFound)
		_, _, err = s.Put(ctx, sqlstore.PutRequest{Key: []byte("late"), Lease: l.ID})
		checkErr(t, "put with a revoked lease", err, sqlstore.ErrLeaseNotFound)
		ids, err := s.Leases(ctx)
		if err != nil || !slices.Equal(ids, []int64{other.ID}) {
			t.Errorf("Leases: got %v, %v; want [%d]", ids, err, other.ID)
		}

		// A lease without keys goes without a revision.
		empty := grant(t, s, 0, 60)
		if rev, err := s.LeaseRevoke(ctx, empty.ID); err != nil || rev != 8 {
			t.Errorf("revoke of a lease without keys: revision %d, error %v; want 8, nil", rev, err)
		}
		checkRev(t, s, 8)
	})
}

func TestLease_Expiry(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		t.Parallel() // it mostly waits for the clock
		ctx := context.Background()
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), LeaseCheckInterval: 50 * time.Millisecond})
		kept := grant(t, s, 0, 2)
		short := grant(t, s, 0, 1)
		long := grant(t, s, 0, 60)
		putLeased(t, s, "kept", "k", kept.ID)
		putLeased(t, s, "short/1", "1", short.ID)
		putLeased(t, s, "short/2", "2", short.ID)
		putLeased(t, s, "long", "l", long.ID)
		start := currentRev(t, s)
		w, rec := watch(t, s, []byte("short/"), []byte("short0"), start+1)

		// Keep one lease alive for well past its TTL; the other expires
		// meanwhile and takes its keys with it, at one revision.
		granted := time.Now()
		for time.Since(granted) < 2500*time.Millisecond {
			if _, err := s.LeaseKeepAlive(ctx, kept.ID); err != nil {
				t.Fatalf("keepalive after %s: %v", time.Since(granted), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		eventually(t, "keys of the expired lease to go", func() (bool, error) {
			res, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("short/"), End: []byte("short0"), CountOnly: true})
			return err == nil && res.Count == 0, err
		})
		waitSent(t, w, start+1)
		evs := rec.events()
		if len(evs) != 2 || evs[0].Type != sqlstore.EventDelete || evs[0].KV.ModRevision != start+1 || evs[1].KV.ModRevision != start+1 {
			t.Errorf("expiry events: got %s, want both keys deleted at revision %d", evStrings(evs), start+1)
		}
		_, err := s.LeaseTimeToLive(ctx, short.ID, false)
		checkErr(t, "time-to-live of an expired lease", err, sqlstore.ErrLeaseNotFound)
		if get(t, s, "kept") == nil || get(t, s, "long") == nil {
			t.Errorf("keys of live leases went with the expired one")
		}

		// Stop the keepalives: the kept lease expires too.
		eventually(t, "key of the no longer kept lease to go", func() (bool, error) {
			res, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("kept"), CountOnly: true})
			return err == nil && res.Count == 0, err
		})
		_, err = s.LeaseKeepAlive(ctx, kept.ID)
		checkErr(t, "keepalive of an expired lease", err, sqlstore.ErrLeaseNotFound)
		ids, err := s.Leases(ctx)
		if err != nil || !slices.Equal(ids, []int64{long.ID}) {
			t.Errorf("Leases: got %v, %v; want [%d]", ids, err, long.ID)
		}
		checkKV(t, "long", get(t, s, "long"), ptr(kv("long", "l", 5, 5, 1, long.ID)))
	})
}

// TestLease_SurvivesRestart closes and reopens the store: the lease, its
// keys and its clock carry on.
func TestLease_SurvivesRestart(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		t.Parallel() // it mostly waits for the clock
		ctx := context.Background()
		dsn := b.NewDSN(t)
		s := open(t, dsn)
		l := grant(t, s, 4711, 30)
		putLeased(t, s, "leased", "v", l.ID)

		// Let the clock run until a second is gone.
		var before *sqlstore.Lease
		eventually(t, "a second of the lease to pass", func() (bool, error) {
			ttl, err := s.LeaseTimeToLive(ctx, l.ID, false)
			before = ttl
			return err == nil && ttl.Remaining < 30, err
		})
		// A lease that runs out while no store is open...
		short := grant(t, s, 0, 1)
		putLeased(t, s, "short", "v", short.ID)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s2 := openWith(t, sqlstore.Options{DSN: dsn, LeaseCheckInterval: 50 * time.Millisecond})
		// ...is expired by the next one.
		eventually(t, "the key of a lease granted before the restart to expire", func() (bool, error) {
			res, err := s2.Range(ctx, sqlstore.RangeRequest{Key: []byte("short"), CountOnly: true})
			return err == nil && res.Count == 0, err
		})
		after := timeToLive(t, s2, l.ID, true)
		if after.TTL != 30 || after.Remaining > before.Remaining {
			t.Errorf("after reopen: TTL %d remaining %d, want TTL 30 and remaining at most %d (not restarted)", after.TTL, after.Remaining, before.Remaining)
		}
		checkStrings(t, "keys after reopen", bytesStrings(after.Keys), []string{"leased"})
		ids, err := s2.Leases(ctx)
		if err != nil || !slices.Equal(ids, []int64{l.ID}) {
			t.Errorf("Leases after reopen: got %v, %v", ids, err)
		}
		if ttl, err := s2.LeaseKeepAlive(ctx, l.ID); err != nil || ttl != 30 {
			t.Errorf("keepalive after reopen: TTL %d, error %v", ttl, err)
		}
		if _, err := s2.LeaseGrant(ctx, l.ID, 5); !errors.Is(err, sqlstore.ErrLeaseExists) {
			t.Errorf("grant of the lease's ID after reopen: got %v, want ErrLeaseExists", err)
		}
		if _, err := s2.LeaseRevoke(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
		checkKV(t, "leased after revoke", get(t, s2, "leased"), nil)
	})
}
