package sqlstore

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// TestDelSet_MatchesRanges compares the merged set with asking every
// range, for random ranges (single keys, bounded, from-key, empty) added
// in random batches over a small key space.
func TestDelSet_MatchesRanges(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	key := func() []byte {
		b := make([]byte, rng.Intn(3))
		for i := range b {
			b[i] = byte('a' + rng.Intn(4))
		}
		return b
	}
	for round := 0; round < 200; round++ {
		var set delSet
		var all []keyRange
		for batch := rng.Intn(6); batch >= 0; batch-- {
			var add []keyRange
			for n := rng.Intn(5); n > 0; n-- {
				var end []byte
				switch rng.Intn(4) {
				case 1:
					end = []byte{0}
				case 2, 3:
					end = key()
				}
				add = append(add, newKeyRange(key(), end))
			}
			set.add(add)
			all = append(all, add...)
			for probe := 0; probe < 50; probe++ {
				k := key()
				want := false
				for _, r := range all {
					want = want || r.contains(k)
				}
				if got := set.contains(k); got != want {
					t.Fatalf("round %d: contains(%q) = %v, want %v; ranges %+v, set %+v", round, k, got, want, all, set.ivs)
				}
			}
		}
	}
}

// TestCheckTxn_ManyNestedWrites: a txn of 42 txns of 42 txns, each putting
// 21 keys and deleting 21 others (74,088 ops, within etcd's limits and a
// request's size), is checked in well under a second. Checking each put
// against every delete before it took over 10 s of CPU.
func TestCheckTxn_ManyNestedWrites(t *testing.T) {
	var top TxnRequest
	for i := 0; i < 42; i++ {
		var mid TxnRequest
		for j := 0; j < 42; j++ {
			var leaf TxnRequest
			for k := 0; k < 21; k++ {
				leaf.Success = append(leaf.Success, Op{Put: &PutRequest{Key: fmt.Appendf(nil, "p/%d/%d/%d", i, j, k)}})
				leaf.Failure = append(leaf.Failure, Op{Delete: &DeleteRequest{Key: fmt.Appendf(nil, "d/%d/%d/%d", i, j, k)}})
			}
			mid.Success = append(mid.Success, Op{Txn: &leaf})
		}
		top.Success = append(top.Success, Op{Txn: &mid})
	}
	start := time.Now()
	if err := checkTxn(&top); err != nil {
		t.Fatalf("checkTxn: %v", err)
	}
	took := time.Since(start)
	t.Logf("checked 74,088 nested ops in %v", took)
	if took > 5*time.Second {
		t.Errorf("checking 74,088 nested ops took %v, want well under 5 s", took)
	}
	// An overlap deep in it is still found: as etcd, a put in a nested
	// txn after one that deletes its key.
	top.Success[0].Txn.Success[0].Txn.Failure[0].Delete.Key = []byte("p/41/41/20")
	if err := checkTxn(&top); err != ErrDuplicateKey {
		t.Errorf("checkTxn with a nested put of a key a nested txn before it deletes: %v, want %v", err, ErrDuplicateKey)
	}
}
