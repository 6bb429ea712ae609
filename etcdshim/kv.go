package etcdshim

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

type kvServer struct {
	pb.UnimplementedKVServer
	s *Server
}

// checkSize refuses a request larger than MaxRequestBytes with etcd's
// "request is too large". The KV methods check it themselves, rather than
// a gRPC interceptor, so that in-process clients (LocalClient) meet the same
// limit as remote ones.
func checkSize(r proto.Message) error {
	if proto.Size(r) > MaxRequestBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}

func checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 && len(r.RangeEnd) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDelete(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 && len(r.RangeEnd) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// checkTxn validates a txn as etcd does: every compare names a key, every
// op names a request (etcd answers "key not found" for one that does not)
// and is valid itself, and no list holds more than MaxTxnOps. A nested txn
// may hold only what its parent leaves: MaxTxnOps less the longest list
// (compares, success or failure) of each txn above it, which also bounds
// how deep txns nest.
func checkTxn(r *pb.TxnRequest) error { return checkTxnOps(r, MaxTxnOps) }

func checkTxnOps(r *pb.TxnRequest, maxOps int) error {
	n := max(len(r.Compare), len(r.Success), len(r.Failure))
	if n > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.GetKey()) == 0 && len(c.GetRangeEnd()) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch {
			case op.GetRequestRange() != nil:
				err = checkRange(op.GetRequestRange())
			case op.GetRequestPut() != nil:
				err = checkPut(op.GetRequestPut())
			case op.GetRequestDeleteRange() != nil:
				err = checkDelete(op.GetRequestDeleteRange())
			case op.GetRequestTxn() != nil:
				err = checkTxnOps(op.GetRequestTxn(), maxOps-n)
			default:
				err = rpctypes.ErrGRPCKeyNotFound
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkSize(r); err != nil {
		return nil, err
	}
	if err := checkRange(r); err != nil {
		return nil, err
	}
	res, err := k.s.be.Range(ctx, fromRange(r))
	if err != nil {
		return nil, toGRPC(err)
	}
	return k.s.rangeResponse(res), nil
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkSize(r); err != nil {
		return nil, err
	}
	if err := checkPut(r); err != nil {
		return nil, err
	}
	res, rev, err := k.s.be.Put(ctx, fromPut(r))
	if err != nil {
		k.s.raiseNoSpace(ctx, err)
		return nil, toGRPC(err)
	}
	return &pb.PutResponse{Header: k.s.header(rev), PrevKv: toKV(res.PrevKV)}, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkSize(r); err != nil {
		return nil, err
	}
	if err := checkDelete(r); err != nil {
		return nil, err
	}
	res, rev, err := k.s.be.DeleteRange(ctx, fromDelete(r))
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.DeleteRangeResponse{Header: k.s.header(rev), Deleted: res.Deleted, PrevKvs: toKVs(res.PrevKVs)}, nil
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkSize(r); err != nil {
		return nil, err
	}
	if err := checkTxn(r); err != nil {
		return nil, err
	}
	req := fromTxn(r)
	req.MaxResultBytes = maxSendBytes
	res, err := k.s.be.Txn(ctx, req)
	if err != nil {
		k.s.raiseNoSpace(ctx, err)
		return nil, toGRPC(err)
	}
	return k.s.txnResponse(res, res.Revision), nil
}

func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	rev, err := k.s.be.Compact(ctx, r.Revision)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.CompactionResponse{Header: k.s.header(rev)}, nil
}
