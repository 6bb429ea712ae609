package sqlstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestStore_TxnMaxResultBytes: a txn whose ranges (nested ones too) read
// more than MaxResultBytes fails with ErrResultTooLarge, writing nothing,
// whether it only reads or also writes; within the limit, or with none,
// it reads everything.
func TestStore_TxnMaxResultBytes(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		s := open(t, b.NewDSN(t))
		val := strings.Repeat("v", 1000)
		for i := 0; i < 10; i++ {
			put(t, s, fmt.Sprintf("r/%d", i), val)
		}
		// Ten ranges of every key, one nested: about 100 kB.
		var ops []sqlstore.Op
		for i := 0; i < 9; i++ {
			ops = append(ops, rangeOp("r/", "r0"))
		}
		ops = append(ops, txnOp(sqlstore.TxnRequest{Success: []sqlstore.Op{rangeOp("r/", "r0")}}))
		write := append([]sqlstore.Op{putOp("w", "1")}, ops...)
		for _, tt := range []struct {
			name string
			ops  []sqlstore.Op
			max  int64
			want error
		}{
			{"no limit", ops, 0, nil},
			{"within the limit", ops, 200_000, nil},
			{"past the limit", ops, 50_000, sqlstore.ErrResultTooLarge},
			{"past the limit in the nested txn", ops, 95_000, sqlstore.ErrResultTooLarge},
			{"a write past the limit", write, 50_000, sqlstore.ErrResultTooLarge},
		} {
			t.Run(tt.name, func(t *testing.T) {
				before := currentRev(t, s)
				res, err := s.Txn(ctx, &sqlstore.TxnRequest{Success: tt.ops, MaxResultBytes: tt.max})
				checkErr(t, "Txn", err, tt.want)
				if err != nil {
					if got := currentRev(t, s); got != before {
						t.Errorf("a failed txn moved the revision from %d to %d", before, got)
					}
					return
				}
				if n := len(res.Results[0].Range.KVs); n != 10 {
					t.Errorf("first range read %d keys, want 10", n)
				}
			})
		}
	})
}
