package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

func rangeOp(key, end string) sqlstore.Op {
	r := &sqlstore.RangeRequest{Key: []byte(key)}
	if end != "" {
		r.End = []byte(end)
	}
	return sqlstore.Op{Range: r}
}

func putOp(key, val string) sqlstore.Op {
	return sqlstore.Op{Put: &sqlstore.PutRequest{Key: []byte(key), Value: []byte(val)}}
}

func delOp(key, end string) sqlstore.Op {
	d := &sqlstore.DeleteRequest{Key: []byte(key), PrevKV: true}
	if end != "" {
		d.End = []byte(end)
	}
	return sqlstore.Op{Delete: d}
}

func txnOp(req sqlstore.TxnRequest) sqlstore.Op { return sqlstore.Op{Txn: &req} }

// txn runs a txn that must not fail.
func txn(t *testing.T, s *sqlstore.Store, req sqlstore.TxnRequest) *sqlstore.TxnResult {
	t.Helper()
	res, err := s.Txn(context.Background(), &req)
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	return res
}

func cmpNum(key string, target sqlstore.CompareTarget, result sqlstore.CompareResult, n int64) sqlstore.Compare {
	return sqlstore.Compare{Key: []byte(key), Target: target, Result: result, Number: n}
}

func cmpVal(key string, result sqlstore.CompareResult, v string) sqlstore.Compare {
	return sqlstore.Compare{Key: []byte(key), Target: sqlstore.CompareValue, Result: result, Value: []byte(v)}
}

func TestStore_TxnCompare(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		const L = 4242
		if _, err := s.LeaseGrant(ctx, L, 60); err != nil {
			t.Fatal(err)
		}
		put(t, s, "a-other", "o") // 2
		if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("m"), Lease: L}); err != nil {
			t.Fatal(err)
		} // 3
		if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("m"), IgnoreLease: true}); err != nil {
			t.Fatal(err)
		} // 4: k is "m" c3 m4 v2 lease L
		put(t, s, "r/a", "1") // 5
		put(t, s, "r/b", "1") // 6
		put(t, s, "r/b", "2") // 7

		const (
			eq = sqlstore.CompareEqual
			gt = sqlstore.CompareGreater
			lt = sqlstore.CompareLess
			ne = sqlstore.CompareNotEqual
		)
		var (
			value   = sqlstore.CompareValue
			version = sqlstore.CompareVersion
			create  = sqlstore.CompareCreate
			mod     = sqlstore.CompareMod
			lease   = sqlstore.CompareLease
		)
		tests := []struct {
			name string
			cmp  []sqlstore.Compare
			want bool
		}{
			{"value =", []sqlstore.Compare{cmpVal("k", eq, "m")}, true},
			{"value = other", []sqlstore.Compare{cmpVal("k", eq, "n")}, false},
			{"value >", []sqlstore.Compare{cmpVal("k", gt, "l")}, true},
			{"value > same", []sqlstore.Compare{cmpVal("k", gt, "m")}, false},
			{"value <", []sqlstore.Compare{cmpVal("k", lt, "n")}, true},
			{"value < longer", []sqlstore.Compare{cmpVal("k", lt, "m\x00")}, true},
			{"value < same", []sqlstore.Compare{cmpVal("k", lt, "m")}, false},
			{"value !=", []sqlstore.Compare{cmpVal("k", ne, "x")}, true},
			{"value != same", []sqlstore.Compare{cmpVal("k", ne, "m")}, false},
			{"value = upper case", []sqlstore.Compare{cmpVal("k", eq, "M")}, false},

			{"version =", []sqlstore.Compare{cmpNum("k", version, eq, 2)}, true},
			{"version = other", []sqlstore.Compare{cmpNum("k", version, eq, 1)}, false},
			{"version >", []sqlstore.Compare{cmpNum("k", version, gt, 1)}, true},
			{"version > same", []sqlstore.Compare{cmpNum("k", version, gt, 2)}, false},
			{"version <", []sqlstore.Compare{cmpNum("k", version, lt, 3)}, true},
			{"version < same", []sqlstore.Compare{cmpNum("k", version, lt, 2)}, false},
			{"version !=", []sqlstore.Compare{cmpNum("k", version, ne, 1)}, true},
			{"version != same", []sqlstore.Compare{cmpNum("k", version, ne, 2)}, false},

			{"create =", []sqlstore.Compare{cmpNum("k", create, eq, 3)}, true},
			{"create = other", []sqlstore.Compare{cmpNum("k", create, eq, 4)}, false},
			{"create >", []sqlstore.Compare{cmpNum("k", create, gt, 2)}, true},
			{"create > same", []sqlstore.Compare{cmpNum("k", create, gt, 3)}, false},
			{"create <", []sqlstore.Compare{cmpNum("k", create, lt, 4)}, true},
			{"create < same", []sqlstore.Compare{cmpNum("k", create, lt, 3)}, false},
			{"create !=", []sqlstore.Compare{cmpNum("k", create, ne, 4)}, true},
			{"create != same", []sqlstore.Compare{cmpNum("k", create, ne, 3)}, false},

			{"mod =", []sqlstore.Compare{cmpNum("k", mod, eq, 4)}, true},
			{"mod = create", []sqlstore.Compare{cmpNum("k", mod, eq, 3)}, false},
			{"mod >", []sqlstore.Compare{cmpNum("k", mod, gt, 3)}, true},
			{"mod > same", []sqlstore.Compare{cmpNum("k", mod, gt, 4)}, false},
			{"mod <", []sqlstore.Compare{cmpNum("k", mod, lt, 5)}, true},
			{"mod < same", []sqlstore.Compare{cmpNum("k", mod, lt, 4)}, false},
			{"mod !=", []sqlstore.Compare{cmpNum("k", mod, ne, 0)}, true},
			{"mod != same", []sqlstore.Compare{cmpNum("k", mod, ne, 4)}, false},

			{"lease =", []sqlstore.Compare{cmpNum("k", lease, eq, L)}, true},
			{"lease = none", []sqlstore.Compare{cmpNum("k", lease, eq, 0)}, false},
			{"lease >", []sqlstore.Compare{cmpNum("k", lease, gt, 0)}, true},
			{"lease > same", []sqlstore.Compare{cmpNum("k", lease, gt, L)}, false},
			{"lease <", []sqlstore.Compare{cmpNum("k", lease, lt, L+1)}, true},
			{"lease < same", []sqlstore.Compare{cmpNum("k", lease, lt, L)}, false},
			{"lease !=", []sqlstore.Compare{cmpNum("k", lease, ne, 0)}, true},
			{"lease != same", []sqlstore.Compare{cmpNum("k", lease, ne, L)}, false},
			{"lease of unleased key", []sqlstore.Compare{cmpNum("a-other", lease, eq, 0)}, true},

			// A missing key has version, revisions and lease 0; a value
			// compare on it never holds.
			{"missing version = 0", []sqlstore.Compare{cmpNum("nope", version, eq, 0)}, true},
			{"missing version > 0", []sqlstore.Compare{cmpNum("nope", version, gt, 0)}, false},
			{"missing create = 0", []sqlstore.Compare{cmpNum("nope", create, eq, 0)}, true},
			{"missing mod = 0", []sqlstore.Compare{cmpNum("nope", mod, eq, 0)}, true},
			{"missing mod < 1", []sqlstore.Compare{cmpNum("nope", mod, lt, 1)}, true},
			{"missing lease = 0", []sqlstore.Compare{cmpNum("nope", lease, eq, 0)}, true},
			{"missing value = empty", []sqlstore.Compare{cmpVal("nope", eq, "")}, false},
			{"missing value != x", []sqlstore.Compare{cmpVal("nope", ne, "x")}, false},
			{"missing value < x", []sqlstore.Compare{cmpVal("nope", lt, "x")}, false},

			// A range compare must hold for every key in it.
			{"range version > 0", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: version, Result: gt}}, true},
			{"range version = 1", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: version, Result: eq, Number: 1}}, false},
			{"range version < 3", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: version, Result: lt, Number: 3}}, true},
			{"range mod > 4", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: mod, Result: gt, Number: 4}}, true},
			{"range mod > 5", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: mod, Result: gt, Number: 5}}, false},
			{"range value != zzz", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: value, Result: ne, Value: []byte("zzz")}}, true},
			{"range value = 1", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: value, Result: eq, Value: []byte("1")}}, false},
			{"range create < 10", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: create, Result: lt, Number: 10}}, true},
			{"range lease = 0", []sqlstore.Compare{{Key: []byte("r/"), End: []byte("r0"), Target: lease, Result: eq}}, true},
			{"range with leased key", []sqlstore.Compare{{Key: []byte("a"), End: []byte("l"), Target: lease, Result: eq}}, false},
			{"from-key range", []sqlstore.Compare{{Key: []byte("r/b"), End: []byte{0}, Target: version, Result: eq, Number: 2}}, true},
			{"empty range version = 0", []sqlstore.Compare{{Key: []byte("s/"), End: []byte("s0"), Target: version, Result: eq}}, true},
			{"empty range value", []sqlstore.Compare{{Key: []byte("s/"), End: []byte("s0"), Target: value, Result: eq}}, false},

			{"no compares", nil, true},
			{"all hold", []sqlstore.Compare{cmpVal("k", eq, "m"), cmpNum("k", version, eq, 2), cmpNum("r/b", mod, eq, 7)}, true},
			{"one fails", []sqlstore.Compare{cmpVal("k", eq, "m"), cmpNum("k", version, eq, 3), cmpNum("r/b", mod, eq, 7)}, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res := txn(t, s, sqlstore.TxnRequest{
					Compare: tt.cmp,
					Success: []sqlstore.Op{rangeOp("k", "")},
					Failure: []sqlstore.Op{rangeOp("r/", "r0")},
				})
				if res.Succeeded != tt.want {
					t.Errorf("Succeeded: got %v, want %v", res.Succeeded, tt.want)
				}
				if res.Revision != 7 {
					t.Errorf("Revision: got %d, want 7", res.Revision)
				}
				if len(res.Results) != 1 || res.Results[0].Range == nil {
					t.Fatalf("Results: got %+v, want one range result", res.Results)
				}
				want := []string{"k"}
				if !tt.want {
					want = []string{"r/a", "r/b"}
				}
				checkStrings(t, "branch read", keyStrings(res.Results[0].Range.KVs), want)

				// The same compare in a txn that can write, so it goes
				// through the writer: the same branch is taken.
				neverWrites := txnOp(sqlstore.TxnRequest{
					Compare: []sqlstore.Compare{cmpVal("k", eq, "never")},
					Success: []sqlstore.Op{putOp("never", "written")},
				})
				wres := txn(t, s, sqlstore.TxnRequest{
					Compare: tt.cmp,
					Success: []sqlstore.Op{rangeOp("k", "")},
					Failure: []sqlstore.Op{rangeOp("r/", "r0"), neverWrites},
				})
				if wres.Succeeded != tt.want {
					t.Errorf("Succeeded through the writer: got %v, want %v", wres.Succeeded, tt.want)
				}
			})
		}
		// None of this wrote.
		checkRev(t, s, 7)
	})
}

func TestStore_TxnBranches(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))
		put(t, s, "k", "m") // 2
		put(t, s, "x", "x") // 3
		put(t, s, "y", "y") // 4
		w, rec := watch(t, s, []byte{0}, []byte{0}, 5)

		tx := sqlstore.TxnRequest{
			Compare: []sqlstore.Compare{cmpVal("k", sqlstore.CompareEqual, "m")},
			Success: []sqlstore.Op{
				{Put: &sqlstore.PutRequest{Key: []byte("k"), Value: []byte("m2"), PrevKV: true}},
				delOp("x", ""),
				rangeOp("k", ""),
				putOp("n", "new"),
				rangeOp("a", "z"),
				{Range: &sqlstore.RangeRequest{Key: []byte("k"), Revision: 3}},
			},
			Failure: []sqlstore.Op{putOp("f", "failed"), rangeOp("k", "")},
		}

		t.Run("success branch at one revision", func(t *testing.T) {
			res := txn(t, s, tx)
			if !res.Succeeded || res.Revision != 5 || len(res.Results) != 6 {
				t.Fatalf("got succeeded %v revision %d with %d results, want true, 5, 6", res.Succeeded, res.Revision, len(res.Results))
			}
			checkKV(t, "put PrevKV", res.Results[0].Put.PrevKV, ptr(kv("k", "m", 2, 2, 1, 0)))
			if d := res.Results[1].Delete; d.Deleted != 1 {
				t.Errorf("delete: deleted %d, want 1", d.Deleted)
			} else {
				checkKVs(t, "delete PrevKVs", d.PrevKVs, []sqlstore.KeyValue{kv("x", "x", 3, 3, 1, 0)})
			}
			// Reads in the txn see its own earlier writes.
			checkKVs(t, "read of own put", res.Results[2].Range.KVs, []sqlstore.KeyValue{kv("k", "m2", 2, 5, 2, 0)})
			checkKVs(t, "read of the whole range", res.Results[4].Range.KVs,
				[]sqlstore.KeyValue{kv("k", "m2", 2, 5, 2, 0), kv("n", "new", 5, 5, 1, 0), kv("y", "y", 4, 4, 1, 0)})
			if r := res.Results[4].Range; r.Revision != 5 || r.Count != 3 {
				t.Errorf("range in txn: revision %d count %d, want 5, 3", r.Revision, r.Count)
			}
			checkKVs(t, "historical read in txn", res.Results[5].Range.KVs, []sqlstore.KeyValue{kv("k", "m", 2, 2, 1, 0)})

			checkRev(t, s, 5)
			checkKV(t, "k", get(t, s, "k"), ptr(kv("k", "m2", 2, 5, 2, 0)))
			checkKV(t, "n", get(t, s, "n"), ptr(kv("n", "new", 5, 5, 1, 0)))
			checkKV(t, "x", get(t, s, "x"), nil)
			checkKV(t, "x before", getAt(t, s, "x", 4), ptr(kv("x", "x", 3, 3, 1, 0)))
			checkKV(t, "f", get(t, s, "f"), nil)

			// The watch sees the txn's changes at one revision, in op order.
			waitSent(t, w, 5)
			checkStrings(t, "events", evStrings(rec.events()), evStrings([]sqlstore.Event{
				putEv(kv("k", "m2", 2, 5, 2, 0), ptr(kv("k", "m", 2, 2, 1, 0))),
				delEv("x", 5, ptr(kv("x", "x", 3, 3, 1, 0))),
				putEv(kv("n", "new", 5, 5, 1, 0), nil),
			}))
		})

		t.Run("failure branch", func(t *testing.T) {
			res := txn(t, s, tx) // k is m2 now
			if res.Succeeded || res.Revision != 6 || len(res.Results) != 2 {
				t.Fatalf("got succeeded %v revision %d with %d results, want false, 6, 2", res.Succeeded, res.Revision, len(res.Results))
			}
			if res.Results[0].Put == nil || res.Results[0].Put.PrevKV != nil {
				t.Errorf("put result: %+v, want a put without PrevKV", res.Results[0].Put)
			}
			checkKVs(t, "read in failure branch", res.Results[1].Range.KVs, []sqlstore.KeyValue{kv("k", "m2", 2, 5, 2, 0)})
			checkKV(t, "f", get(t, s, "f"), ptr(kv("f", "failed", 6, 6, 1, 0)))
			checkKV(t, "n", get(t, s, "n"), ptr(kv("n", "new", 5, 5, 1, 0)))
		})

		t.Run("branch without writes", func(t *testing.T) {
			// Able to write, but the branch taken only reads.
			res := txn(t, s, sqlstore.TxnRequest{
				Compare: []sqlstore.Compare{cmpNum("f", sqlstore.CompareVersion, sqlstore.CompareEqual, 1)},
				Success: []sqlstore.Op{rangeOp("f", "")},
				Failure: []sqlstore.Op{putOp("g", "g")},
			})
			if !res.Succeeded || res.Revision != 6 {
				t.Errorf("got succeeded %v revision %d, want true 6", res.Succeeded, res.Revision)
			}
			// A delete that matches nothing does not write either.
			res = txn(t, s, sqlstore.TxnRequest{Success: []sqlstore.Op{delOp("nothing", "")}})
			if !res.Succeeded || res.Revision != 6 || res.Results[0].Delete.Deleted != 0 {
				t.Errorf("delete of nothing: got %+v, want revision 6 and nothing deleted", res)
			}
			checkRev(t, s, 6)
		})

		t.Run("read-only txn", func(t *testing.T) {
			res := txn(t, s, sqlstore.TxnRequest{
				Success: []sqlstore.Op{rangeOp("k", ""), {Range: &sqlstore.RangeRequest{Key: []byte("x"), Revision: 3}}, rangeOp("a", "z")},
			})
			if !res.Succeeded || res.Revision != 6 || len(res.Results) != 3 {
				t.Fatalf("got %+v, want success at revision 6 with 3 results", res)
			}
			checkKVs(t, "historical read", res.Results[1].Range.KVs, []sqlstore.KeyValue{kv("x", "x", 3, 3, 1, 0)})
			if got := res.Results[2].Range.Count; got != 4 {
				t.Errorf("count of a..z: got %d, want 4 (f, k, n, y)", got)
			}
			empty := txn(t, s, sqlstore.TxnRequest{})
			if !empty.Succeeded || empty.Revision != 6 || len(empty.Results) != 0 {
				t.Errorf("empty txn: got %+v, want success at revision 6 without results", empty)
			}
			checkRev(t, s, 6)
		})
	})
}

func TestStore_TxnNested(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))
		put(t, s, "k", "v") // 2

		inner := func(cmp sqlstore.Compare) sqlstore.Op {
			return txnOp(sqlstore.TxnRequest{
				Compare: []sqlstore.Compare{cmp},
				Success: []sqlstore.Op{putOp("inner", "then"), rangeOp("outer", "")},
				Failure: []sqlstore.Op{putOp("inner", "else"), rangeOp("k", "")},
			})
		}
		res := txn(t, s, sqlstore.TxnRequest{
			Compare: []sqlstore.Compare{cmpNum("k", sqlstore.CompareVersion, sqlstore.CompareGreater, 0)},
			Success: []sqlstore.Op{
				putOp("outer", "o"),
				inner(cmpNum("outer", sqlstore.CompareVersion, sqlstore.CompareEqual, 1)), // sees the put above
				rangeOp("inner", ""),
			},
		})
		if !res.Succeeded || res.Revision != 3 || len(res.Results) != 3 {
			t.Fatalf("outer: got succeeded %v revision %d results %d, want true, 3, 3", res.Succeeded, res.Revision, len(res.Results))
		}
		in := res.Results[1].Txn
		if in == nil || !in.Succeeded || len(in.Results) != 2 || in.Revision != 3 {
			t.Fatalf("inner: got %+v, want success at revision 3 with 2 results", in)
		}
		checkKVs(t, "inner read of outer put", in.Results[1].Range.KVs, []sqlstore.KeyValue{kv("outer", "o", 3, 3, 1, 0)})
		checkKVs(t, "outer read of inner put", res.Results[2].Range.KVs, []sqlstore.KeyValue{kv("inner", "then", 3, 3, 1, 0)})
		checkRev(t, s, 3)

		// Inner compare fails: its failure branch runs, still at the outer
		// txn's one revision.
		res = txn(t, s, sqlstore.TxnRequest{
			Success: []sqlstore.Op{
				putOp("outer", "o2"),
				inner(cmpNum("outer", sqlstore.CompareVersion, sqlstore.CompareEqual, 1)), // version is 2 now
			},
		})
		in = res.Results[1].Txn
		if !res.Succeeded || res.Revision != 4 || in == nil || in.Succeeded {
			t.Fatalf("got %+v, want outer success and inner failure at revision 4", res)
		}
		checkKVs(t, "inner failure read", in.Results[1].Range.KVs, []sqlstore.KeyValue{kv("k", "v", 2, 2, 1, 0)})
		checkKV(t, "inner", get(t, s, "inner"), ptr(kv("inner", "else", 3, 4, 2, 0)))
		checkKV(t, "outer", get(t, s, "outer"), ptr(kv("outer", "o2", 3, 4, 2, 0)))

		// Read-only nesting.
		res = txn(t, s, sqlstore.TxnRequest{Success: []sqlstore.Op{txnOp(sqlstore.TxnRequest{Success: []sqlstore.Op{rangeOp("k", "")}})}})
		if in := res.Results[0].Txn; res.Revision != 4 || in == nil || len(in.Results) != 1 || len(in.Results[0].Range.KVs) != 1 {
			t.Errorf("read-only nested txn: got %+v", res)
		}
		checkRev(t, s, 4)
	})
}

func TestStore_TxnInvalid(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		put(t, s, "k", "v") // 2

		bad := []struct {
			name string
			req  sqlstore.TxnRequest
			want error
		}{
			{"same key twice", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("a", "1"), putOp("a", "2")}}, sqlstore.ErrDuplicateKey},
			{"same key twice in failure", sqlstore.TxnRequest{Failure: []sqlstore.Op{putOp("a", "1"), putOp("a", "2")}}, sqlstore.ErrDuplicateKey},
			{"put in deleted range", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("b", "1"), delOp("a", "c")}}, sqlstore.ErrDuplicateKey},
			{"delete then put", sqlstore.TxnRequest{Success: []sqlstore.Op{delOp("a", ""), putOp("a", "1")}}, sqlstore.ErrDuplicateKey},
			{"put in deleted from-key range", sqlstore.TxnRequest{Success: []sqlstore.Op{delOp("a", "\x00"), putOp("z", "1")}}, sqlstore.ErrDuplicateKey},
			{"nested put of an outer key", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("a", "1"), txnOp(sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("a", "2")}})}}, sqlstore.ErrDuplicateKey},
			{"nested else put of an outer key", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("a", "1"), txnOp(sqlstore.TxnRequest{Failure: []sqlstore.Op{putOp("a", "2")}})}}, sqlstore.ErrDuplicateKey},
			{"nested put in outer delete", sqlstore.TxnRequest{Success: []sqlstore.Op{delOp("a", "c"), txnOp(sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("b", "2")}})}}, sqlstore.ErrDuplicateKey},
			{"empty put key", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("", "1")}}, sqlstore.ErrEmptyKey},
			{"empty range key", sqlstore.TxnRequest{Success: []sqlstore.Op{rangeOp("", "")}}, sqlstore.ErrEmptyKey},
			{"empty nested key", sqlstore.TxnRequest{Success: []sqlstore.Op{txnOp(sqlstore.TxnRequest{Failure: []sqlstore.Op{delOp("", "")}})}}, sqlstore.ErrEmptyKey},
			{"read at a future revision", sqlstore.TxnRequest{Success: []sqlstore.Op{{Range: &sqlstore.RangeRequest{Key: []byte("k"), Revision: 100}}}}, sqlstore.ErrFutureRevision},
			// Failures after the txn has written: nothing of it may stay.
			{"future read after a write", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("w", "1"), {Range: &sqlstore.RangeRequest{Key: []byte("k"), Revision: 100}}}}, sqlstore.ErrFutureRevision},
			{"unknown lease after a write", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("w", "1"), {Put: &sqlstore.PutRequest{Key: []byte("w2"), Lease: 999}}}}, sqlstore.ErrLeaseNotFound},
			{"ignore value of a missing key after a write", sqlstore.TxnRequest{Success: []sqlstore.Op{delOp("k", ""), {Put: &sqlstore.PutRequest{Key: []byte("w2"), IgnoreValue: true}}}}, sqlstore.ErrKeyNotFound},
			{"nested failure after a write", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("w", "1"), txnOp(sqlstore.TxnRequest{Success: []sqlstore.Op{{Put: &sqlstore.PutRequest{Key: []byte("w2"), IgnoreLease: true}}}})}}, sqlstore.ErrKeyNotFound},
		}
		for _, tt := range bad {
			t.Run(tt.name, func(t *testing.T) {
				res, err := s.Txn(ctx, &tt.req)
				checkErr(t, "Txn", err, tt.want)
				if res != nil {
					t.Errorf("result of a failed txn: %+v, want nil", res)
				}
				checkRev(t, s, 2)
				checkKV(t, "k", get(t, s, "k"), ptr(kv("k", "v", 2, 2, 1, 0)))
				checkKV(t, "w", get(t, s, "w"), nil)
			})
		}

		good := []struct {
			name string
			req  sqlstore.TxnRequest
		}{
			{"same key in both branches", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("a", "1")}, Failure: []sqlstore.Op{putOp("a", "2")}}},
			{"same key in both nested branches", sqlstore.TxnRequest{Success: []sqlstore.Op{txnOp(sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("b", "1")}, Failure: []sqlstore.Op{putOp("b", "2")}})}}},
			{"overlapping deletes", sqlstore.TxnRequest{Success: []sqlstore.Op{delOp("a", "c"), delOp("b", "d")}}},
			{"put and read of one key", sqlstore.TxnRequest{Success: []sqlstore.Op{putOp("c", "1"), rangeOp("c", "")}}},
			{"put beside a delete range", sqlstore.TxnRequest{Success: []sqlstore.Op{delOp("a", "c"), putOp("c", "2")}}},
		}
		for _, tt := range good {
			t.Run(tt.name, func(t *testing.T) {
				before := currentRev(t, s)
				res, err := s.Txn(ctx, &tt.req)
				if err != nil || !res.Succeeded {
					t.Fatalf("Txn: got %+v, %v; want success", res, err)
				}
				if res.Revision > before+1 {
					t.Errorf("revision went from %d to %d, want at most one step", before, res.Revision)
				}
			})
		}
	})
}

// TestStore_TxnConcurrentCAS runs compare-and-swap increments from many
// goroutines: every op's compare must see the ops committed before it, even
// those in the same group-commit batch.
func TestStore_TxnConcurrentCAS(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		s := open(t, b.NewDSN(t))
		start := put(t, s, "counter", "0")
		total := casIncrements(t, []*sqlstore.Store{s}, 8, 20)
		checkKV(t, "counter", get(t, s, "counter"), ptr(kv("counter", strconv.Itoa(total), start, start+int64(total), int64(total+1), 0)))
		checkRev(t, s, start+int64(total))
	})
}

// casIncrements increments the number in key "counter" incs times from
// workers goroutines per store, each by compare-and-swap on the key's mod
// revision, retrying on conflict. It returns the number of increments.
func casIncrements(t *testing.T, stores []*sqlstore.Store, workers, incs int) int {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers*len(stores))
	for _, s := range stores {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cur, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("counter")})
				if err != nil {
					errs <- err
					return
				}
				kv := cur.KVs[0]
				for done := 0; done < incs; {
					n, err := strconv.Atoi(string(kv.Value))
					if err != nil {
						errs <- err
						return
					}
					res, err := s.Txn(ctx, &sqlstore.TxnRequest{
						Compare: []sqlstore.Compare{cmpNum("counter", sqlstore.CompareMod, sqlstore.CompareEqual, kv.ModRevision)},
						Success: []sqlstore.Op{putOp("counter", strconv.Itoa(n+1)), rangeOp("counter", "")},
						Failure: []sqlstore.Op{rangeOp("counter", "")},
					})
					if err != nil {
						errs <- err
						return
					}
					last := res.Results[len(res.Results)-1].Range.KVs
					if len(last) != 1 {
						errs <- fmt.Errorf("counter read returned %d keys", len(last))
						return
					}
					if res.Succeeded {
						done++
						if got := string(last[0].Value); got != strconv.Itoa(n+1) || last[0].ModRevision != res.Revision {
							errs <- fmt.Errorf("read after increment to %d at revision %d: %s", n+1, res.Revision, kvString(&last[0]))
							return
						}
					}
					kv = last[0]
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return workers * incs * len(stores)
}

// TestStore_BatchFailures mixes writes that succeed with txns that fail
// after they have written: the failures leave nothing behind, and the writes
// that shared their batches are committed once each, without gaps.
func TestStore_BatchFailures(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		w, rec := watch(t, s, []byte{0}, []byte{0}, 1)
		const workers, n = 4, 40
		var wg sync.WaitGroup
		errs := make(chan error, 2*workers)
		good := &written{byRev: map[int64][2]string{}}
		for g := range workers {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := range n {
					key, val := fmt.Sprintf("good/%d/%d", g, i), "v"
					_, rev, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(key), Value: []byte(val)})
					if err != nil {
						errs <- err
						return
					}
					good.add(rev, key, val)
				}
			}()
			go func() {
				defer wg.Done()
				for i := range n {
					_, err := s.Txn(ctx, &sqlstore.TxnRequest{Success: []sqlstore.Op{
						putOp(fmt.Sprintf("bad/%d/%d", g, i), "x"),
						{Put: &sqlstore.PutRequest{Key: []byte(fmt.Sprintf("bad/%d/%d/leased", g, i)), Lease: 999}},
					}})
					if !errors.Is(err, sqlstore.ErrLeaseNotFound) {
						errs <- fmt.Errorf("failing txn: got %v, want ErrLeaseNotFound", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		first, last := int64(2), int64(1+workers*n)
		checkRev(t, s, last)
		waitSent(t, w, last)
		checkGapless(t, good, first, last, rec)
		if res := rng(t, s, sqlstore.RangeRequest{Key: []byte("bad/"), End: []byte("bad0"), CountOnly: true}); res.Count != 0 {
			t.Errorf("keys of failed txns: %d, want 0", res.Count)
		}
	})
}
