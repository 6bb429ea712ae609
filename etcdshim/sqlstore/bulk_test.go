package sqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestStore_BatchedLifecycles runs key lifecycles from many goroutines at
// once, so that creates, updates, deletes and recreates of different keys
// share write batches (where PostgreSQL and MySQL read rows ahead and MySQL
// defers its row writes): every step's answer is right, each revision is
// readable afterwards as that step left it (from the history), and a txn
// that writes two keys and then lists its prefix sees both.
func TestStore_BatchedLifecycles(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		type step struct {
			rev          int64
			key, val     string // val "" for a delete
			create, vers int64
		}
		const workers, keys = 8, 4
		var (
			mu    sync.Mutex
			steps []step
			errs  []string
			wg    sync.WaitGroup
		)
		fail := func(format string, args ...any) {
			mu.Lock()
			errs = append(errs, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		record := func(st step) {
			mu.Lock()
			steps = append(steps, st)
			mu.Unlock()
		}
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range keys {
					key := fmt.Sprintf("life/%d/%d", g, i)
					// Create, as kube-apiserver does.
					res, err := s.Txn(ctx, &sqlstore.TxnRequest{
						Compare: []sqlstore.Compare{cmpNum(key, sqlstore.CompareMod, sqlstore.CompareEqual, 0)},
						Success: []sqlstore.Op{putOp(key, "v1")},
						Failure: []sqlstore.Op{rangeOp(key, "")},
					})
					if err != nil || !res.Succeeded {
						fail("create %s: %v, %v", key, res, err)
						return
					}
					created := res.Revision
					record(step{created, key, "v1", created, 1})
					// Update on the mod revision; a stale one fails and
					// reads the key back.
					res, err = s.Txn(ctx, &sqlstore.TxnRequest{
						Compare: []sqlstore.Compare{cmpNum(key, sqlstore.CompareMod, sqlstore.CompareEqual, created-1)},
						Success: []sqlstore.Op{putOp(key, "stale")},
						Failure: []sqlstore.Op{rangeOp(key, "")},
					})
					if err != nil || res.Succeeded || len(res.Results[0].Range.KVs) != 1 || string(res.Results[0].Range.KVs[0].Value) != "v1" {
						fail("stale update of %s: %+v, %v", key, res, err)
						return
					}
					res, err = s.Txn(ctx, &sqlstore.TxnRequest{
						Compare: []sqlstore.Compare{cmpNum(key, sqlstore.CompareMod, sqlstore.CompareEqual, created)},
						Success: []sqlstore.Op{putOp(key, "v2"), putOp(key+"/side", "s"), rangeOp(key, key+"0")},
					})
					if err != nil || !res.Succeeded {
						fail("update %s: %+v, %v", key, res, err)
						return
					}
					if got := keyStrings(res.Results[2].Range.KVs); len(got) != 2 || got[0] != key || got[1] != key+"/side" ||
						string(res.Results[2].Range.KVs[0].Value) != "v2" || res.Results[2].Range.KVs[0].Version != 2 {
						fail("update %s then list: %v", key, kvStrings(res.Results[2].Range.KVs))
					}
					updated := res.Revision
					record(step{updated, key, "v2", created, 2})
					record(step{updated, key + "/side", "s", updated, 1})
					// Delete both, with their previous rows.
					res, err = s.Txn(ctx, &sqlstore.TxnRequest{
						Compare: []sqlstore.Compare{cmpNum(key, sqlstore.CompareVersion, sqlstore.CompareEqual, 2)},
						Success: []sqlstore.Op{delOp(key, key+"0")},
					})
					if err != nil || !res.Succeeded || res.Results[0].Delete.Deleted != 2 || string(res.Results[0].Delete.PrevKVs[0].Value) != "v2" {
						fail("delete %s: %+v, %v", key, res, err)
						return
					}
					record(step{res.Revision, key, "", 0, 0})
					record(step{res.Revision, key + "/side", "", 0, 0})
					// Recreate: a new life, with no previous row.
					pr, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(key), Value: []byte("v3"), PrevKV: true})
					if err != nil || pr.PrevKV != nil {
						fail("recreate %s: %+v, %v", key, pr, err)
						return
					}
					record(step{rev, key, "v3", rev, 1})
				}
			}()
		}
		wg.Wait()
		for _, e := range errs {
			t.Error(e)
		}
		if t.Failed() {
			return
		}
		for _, st := range steps {
			res := rng(t, s, sqlstore.RangeRequest{Key: []byte(st.key), Revision: st.rev})
			if st.val == "" {
				if len(res.KVs) != 0 {
					t.Errorf("%s at revision %d, where it was deleted: %v", st.key, st.rev, kvStrings(res.KVs))
				}
				continue
			}
			checkKVs(t, fmt.Sprintf("%s at revision %d", st.key, st.rev), res.KVs,
				[]sqlstore.KeyValue{kv(st.key, st.val, st.create, st.rev, st.vers, 0)})
		}
		res := rng(t, s, sqlstore.RangeRequest{Key: []byte("life/"), End: []byte("life0")})
		if res.Count != workers*keys {
			t.Errorf("live keys at the end: %d, want %d", res.Count, workers*keys)
		}
		for _, kv := range res.KVs {
			if string(kv.Value) != "v3" || kv.Version != 1 {
				t.Errorf("%s at the end: %s", kv.Key, kvString(&kv))
			}
		}
	})
}

// TestStore_LargeBatches writes more rows than one multi-row statement
// takes (a txn of 300 puts) and more bytes (concurrent puts of 1 MiB
// values): every row arrives whole.
func TestStore_LargeBatches(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		var ops []sqlstore.Op
		for i := range 300 {
			ops = append(ops, putOp(fmt.Sprintf("many/%03d", i), fmt.Sprintf("v%d", i)))
		}
		res, err := s.Txn(ctx, &sqlstore.TxnRequest{Success: ops})
		if err != nil || !res.Succeeded {
			t.Fatalf("txn of 300 puts: %v, %v", res, err)
		}
		all := rng(t, s, sqlstore.RangeRequest{Key: []byte("many/"), End: []byte("many0")})
		if len(all.KVs) != 300 {
			t.Fatalf("after a txn of 300 puts: %d keys", len(all.KVs))
		}
		for i, kv := range all.KVs {
			if string(kv.Value) != fmt.Sprintf("v%d", i) || kv.ModRevision != res.Revision {
				t.Errorf("key %d: %s", i, kvString(&kv))
			}
		}
		hist := rng(t, s, sqlstore.RangeRequest{Key: []byte("many/"), End: []byte("many0"), Revision: res.Revision, CountOnly: true})
		if hist.Count != 300 {
			t.Errorf("count at the txn's revision: %d", hist.Count)
		}

		const big = 6
		var wg sync.WaitGroup
		errs := make(chan error, big)
		for i := range big {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v := make([]byte, 1<<20)
				for j := range v {
					v[j] = byte(i + j)
				}
				_, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(fmt.Sprintf("big/%d", i)), Value: v})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("put of 1 MiB: %v", err)
			}
		}
		for i := range big {
			kv := get(t, s, fmt.Sprintf("big/%d", i))
			if kv == nil || len(kv.Value) != 1<<20 || kv.Value[0] != byte(i) || kv.Value[1<<20-1] != byte(i+1<<20-1) {
				t.Errorf("big/%d did not round-trip", i)
			}
		}
	})
}
