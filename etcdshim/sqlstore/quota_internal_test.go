package sqlstore

import "testing"

func TestTxnCost(t *testing.T) {
	put := func(key, val string) Op { return Op{Put: &PutRequest{Key: []byte(key), Value: []byte(val)}} }
	del := Op{Delete: &DeleteRequest{Key: []byte("k")}}
	get := Op{Range: &RangeRequest{Key: []byte("k")}}
	for _, tc := range []struct {
		name string
		txn  *TxnRequest
		want int64
	}{
		{"empty", &TxnRequest{}, 0},
		{"reads and deletes", &TxnRequest{Success: []Op{get, del}, Failure: []Op{del}}, 0},
		{"put", &TxnRequest{Success: []Op{put("k", "vv")}}, 256 + 2*3},
		{"costlier branch", &TxnRequest{Success: []Op{put("k", "v")}, Failure: []Op{put("k", "vvvv"), get}}, 256 + 2*5},
		{"both puts of a branch", &TxnRequest{Success: []Op{put("a", "1"), put("b", "2")}}, 2 * (256 + 2*2)},
		{"nested", &TxnRequest{Success: []Op{del, {Txn: &TxnRequest{Success: []Op{get}, Failure: []Op{put("k", "v")}}}}}, 256 + 2*2},
	} {
		if got := txnCost(tc.txn); got != tc.want {
			t.Errorf("%s: txnCost = %d, want %d", tc.name, got, tc.want)
		}
	}
}
