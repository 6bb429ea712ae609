package etcdshim_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func putOps(prefix string, n int) []*pb.RequestOp {
	ops := make([]*pb.RequestOp, n)
	for i := range ops {
		ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "%s/%d", prefix, i)}}}
	}
	return ops
}

func nestedOp(t *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
}

// chain is txns nested levels deep, the innermost reading one key.
func chain(levels int) *pb.TxnRequest {
	t := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}}}
	for i := 1; i < levels; i++ {
		t = &pb.TxnRequest{Success: []*pb.RequestOp{nestedOp(t)}}
	}
	return t
}

// TestKV_TxnChecksLikeEtcd: a txn op that names no request is refused
// with etcd's "key not found" (it was skipped, leaving the response a
// result short: found by FuzzTxn), and a nested txn may hold only the ops
// its parents leave of MaxTxnOps, as in etcd, which also bounds nesting.
func TestKV_TxnChecksLikeEtcd(t *testing.T) {
	ts := startServer(t, "sqlite://"+filepath.Join(t.TempDir(), "state.db"))
	kv := pb.NewKVClient(ts.client.ActiveConnection())
	ctx := testCtx(t)
	tests := []struct {
		name string
		req  *pb.TxnRequest
		want error
	}{
		{"empty op", &pb.TxnRequest{Success: []*pb.RequestOp{{}}}, rpctypes.ErrGRPCKeyNotFound},
		{"empty op in a nested failure", &pb.TxnRequest{Success: []*pb.RequestOp{nestedOp(&pb.TxnRequest{Failure: []*pb.RequestOp{{}}})}}, rpctypes.ErrGRPCKeyNotFound},
		{"nested txn within what its parent leaves", &pb.TxnRequest{Success: append(putOps("a", 99), nestedOp(&pb.TxnRequest{Success: putOps("b", 28)}))}, nil},
		{"nested txn past what its parent leaves", &pb.TxnRequest{Success: append(putOps("a", 99), nestedOp(&pb.TxnRequest{Success: putOps("b", 29)}))}, rpctypes.ErrGRPCTooManyOps},
		{"128 levels", chain(128), nil},
		{"129 levels", chain(129), rpctypes.ErrGRPCTooManyOps},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := kv.Txn(ctx, tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Txn: %v, want %v", err, tt.want)
			}
			if err == nil && len(resp.Responses) != len(tt.req.Success) {
				t.Errorf("Txn: %d responses for %d ops", len(resp.Responses), len(tt.req.Success))
			}
		})
	}
}
