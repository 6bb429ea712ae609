package sqlstore_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// wantCompare is etcd's compare over kvs, the keys of its range: every
// key must hold it; with no key, a value compare fails and the others
// compare zeros.
func wantCompare(c sqlstore.Compare, kvs []sqlstore.KeyValue) bool {
	holds := func(kv sqlstore.KeyValue) bool {
		var r int
		switch c.Target {
		case sqlstore.CompareValue:
			r = bytes.Compare(kv.Value, c.Value)
		case sqlstore.CompareVersion:
			r = cmp.Compare(kv.Version, c.Number)
		case sqlstore.CompareCreate:
			r = cmp.Compare(kv.CreateRevision, c.Number)
		case sqlstore.CompareMod:
			r = cmp.Compare(kv.ModRevision, c.Number)
		case sqlstore.CompareLease:
			r = cmp.Compare(kv.Lease, c.Number)
		}
		switch c.Result {
		case sqlstore.CompareEqual:
			return r == 0
		case sqlstore.CompareNotEqual:
			return r != 0
		case sqlstore.CompareGreater:
			return r > 0
		case sqlstore.CompareLess:
			return r < 0
		}
		return false
	}
	if len(kvs) == 0 {
		return c.Target != sqlstore.CompareValue && holds(sqlstore.KeyValue{})
	}
	for _, kv := range kvs {
		if !holds(kv) {
			return false
		}
	}
	return true
}

// TestStore_TxnCompareRange checks compares over ranges, which the
// database evaluates, against etcd's rules evaluated here: every target
// and result, values that differ in a byte, a length, a zero or a 0xff
// byte, numbers around the keys', ranges of one, some, every and no key.
func TestStore_TxnCompareRange(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		values := []string{"", "\x00", "a", "a\x00", "ab", "b", "\xff", "\xff\xff"}
		for i, v := range values {
			put(t, s, fmt.Sprintf("cr/%d", i), v)
		}
		put(t, s, "cr/1", "\x00") // a second version
		put(t, s, "same/1", "ab")
		put(t, s, "same/2", "ab")
		ranges := [][2]string{{"cr/", "cr0"}, {"cr/2", "cr/5"}, {"cr/3", "cr/4"}, {"same/", "same0"}, {"none/", "none0"}, {"cr/5", "\x00"}}
		var numbers []int64
		for n := int64(-1); n <= currentRev(t, s)+1; n++ {
			numbers = append(numbers, n)
		}
		checked := 0
		for _, r := range ranges {
			res, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte(r[0]), End: []byte(r[1])})
			if err != nil {
				t.Fatal(err)
			}
			for target := sqlstore.CompareVersion; target <= sqlstore.CompareLease; target++ {
				for result := sqlstore.CompareEqual; result <= sqlstore.CompareNotEqual; result++ {
					var cmps []sqlstore.Compare
					if target == sqlstore.CompareValue {
						for _, v := range append(values, "ab\x00", "0") {
							cmps = append(cmps, sqlstore.Compare{Value: []byte(v)})
						}
					} else {
						for _, n := range numbers {
							cmps = append(cmps, sqlstore.Compare{Number: n})
						}
					}
					for _, c := range cmps {
						c.Key, c.End, c.Target, c.Result = []byte(r[0]), []byte(r[1]), target, result
						got, err := s.Txn(ctx, &sqlstore.TxnRequest{Compare: []sqlstore.Compare{c}})
						if err != nil {
							t.Fatalf("Txn(%+v): %v", c, err)
						}
						if want := wantCompare(c, res.KVs); got.Succeeded != want {
							t.Errorf("compare %d %d %q %d over [%q, %q): %v, want %v", c.Target, c.Result, c.Value, c.Number, r[0], r[1], got.Succeeded, want)
						}
						checked++
					}
				}
			}
		}
		t.Logf("%d compares checked", checked)
	})
}
