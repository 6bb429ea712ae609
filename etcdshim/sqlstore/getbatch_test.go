package sqlstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// readStatements is how many read statements the store has observed.
func readStatements(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sqlkube_sql_transaction_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == "read" {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// TestStore_ConcurrentGets runs many single-key reads at once, of present,
// absent and repeated keys, with every read option, while writers update
// keys: each get must answer for its own key, and a get that starts after
// a put returned must see that put (linearizability). On PostgreSQL and
// MySQL concurrent gets share statements, which the read statement count
// shows.
func TestStore_ConcurrentGets(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		reg := prometheus.NewRegistry()
		s := openWith(t, sqlstore.Options{DSN: b.NewDSN(t), Registerer: reg})
		const keys = 50
		for i := range keys {
			put(t, s, "k"+strconv.Itoa(i), "v"+strconv.Itoa(i))
		}
		before := readStatements(t, reg)

		const readers, reads, writers, writes = 32, 40, 4, 25
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []string
			gets int
		)
		fail := func(format string, args ...any) {
			mu.Lock()
			errs = append(errs, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		for r := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range reads {
					n := (r*7 + i*13) % (keys + 10) // keys 50..59 are absent
					key := "k" + strconv.Itoa(n)
					req := sqlstore.RangeRequest{Key: []byte(key), KeysOnly: i%5 == 1, CountOnly: i%5 == 2}
					res, err := s.Range(ctx, req)
					if err != nil {
						fail("get %s: %v", key, err)
						return
					}
					mu.Lock()
					gets++
					mu.Unlock()
					switch {
					case n >= keys:
						if res.Count != 0 || len(res.KVs) != 0 {
							fail("absent key %s: count %d, %d kvs", key, res.Count, len(res.KVs))
						}
					case res.Count != 1:
						fail("key %s: count %d, want 1", key, res.Count)
					case req.CountOnly:
						if len(res.KVs) != 0 {
							fail("count-only get of %s returned %d kvs", key, len(res.KVs))
						}
					case len(res.KVs) != 1 || string(res.KVs[0].Key) != key:
						fail("key %s: got %d kvs (%v)", key, len(res.KVs), keyStrings(res.KVs))
					case req.KeysOnly && res.KVs[0].Value != nil:
						fail("keys-only get of %s returned a value", key)
					case !req.KeysOnly && n >= writers && string(res.KVs[0].Value) != "v"+strconv.Itoa(n):
						fail("key %s: value %q", key, res.KVs[0].Value)
					}
					if len(res.KVs) == 1 && res.KVs[0].ModRevision > res.Revision {
						fail("key %s: mod revision %d after the read's revision %d", key, res.KVs[0].ModRevision, res.Revision)
					}
				}
			}()
		}
		// Writers own keys k0..k3: each put is followed by a get that must
		// see it.
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "k" + strconv.Itoa(w)
				for i := range writes {
					val := key + "@" + strconv.Itoa(i)
					_, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(key), Value: []byte(val)})
					if err != nil {
						fail("put %s: %v", key, err)
						return
					}
					res, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte(key)})
					if err != nil {
						fail("get %s after put: %v", key, err)
						return
					}
					mu.Lock()
					gets++
					mu.Unlock()
					if len(res.KVs) != 1 || res.KVs[0].ModRevision != rev || string(res.KVs[0].Value) != val || res.Revision < rev {
						fail("get %s after its put at revision %d: got %v at revision %d", key, rev, kvStrings(res.KVs), res.Revision)
					}
				}
			}()
		}
		wg.Wait()
		for _, e := range errs {
			t.Error(e)
		}
		statements := readStatements(t, reg) - before
		t.Logf("%d gets in %d read statements", gets, statements)
		if b.Name != "sqlite" && statements >= uint64(gets) {
			t.Errorf("%d concurrent gets took %d statements: no two shared one", gets, statements)
		}
	})
}

// TestStore_GetCanceled: a get whose context ends while it waits returns
// the context's error, and the store keeps serving gets.
func TestStore_GetCanceled(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))
		put(t, s, "a", "1")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("a")}); err == nil {
			t.Errorf("get with a canceled context: no error")
		}
		checkKV(t, "a", get(t, s, "a"), ptr(kv("a", "1", 2, 2, 1, 0)))
	})
}
