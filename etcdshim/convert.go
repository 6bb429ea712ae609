package etcdshim

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

func toKV(kv *sqlstore.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{
		Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Lease: kv.Lease,
	}
}

func toKVs(kvs []sqlstore.KeyValue) []*mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*mvccpb.KeyValue, len(kvs))
	for i := range kvs {
		out[i] = toKV(&kvs[i])
	}
	return out
}

func fromRange(r *pb.RangeRequest) sqlstore.RangeRequest {
	return sqlstore.RangeRequest{
		Key: r.Key, End: r.RangeEnd, Revision: r.Revision, Limit: r.Limit,
		SortOrder: sqlstore.SortOrder(r.SortOrder), SortTarget: sqlstore.SortTarget(r.SortTarget),
		KeysOnly: r.KeysOnly, CountOnly: r.CountOnly,
		MinModRevision: r.MinModRevision, MaxModRevision: r.MaxModRevision,
		MinCreateRevision: r.MinCreateRevision, MaxCreateRevision: r.MaxCreateRevision,
	}
}

func fromPut(r *pb.PutRequest) sqlstore.PutRequest {
	return sqlstore.PutRequest{Key: r.Key, Value: r.Value, Lease: r.Lease, PrevKV: r.PrevKv, IgnoreValue: r.IgnoreValue, IgnoreLease: r.IgnoreLease}
}

func fromDelete(r *pb.DeleteRangeRequest) sqlstore.DeleteRequest {
	return sqlstore.DeleteRequest{Key: r.Key, End: r.RangeEnd, PrevKV: r.PrevKv}
}

func fromCompare(c *pb.Compare) sqlstore.Compare {
	out := sqlstore.Compare{Key: c.Key, End: c.RangeEnd, Result: sqlstore.CompareResult(c.Result)}
	switch c.Target {
	case pb.Compare_VERSION:
		out.Target = sqlstore.CompareVersion
		out.Number = c.GetVersion()
	case pb.Compare_CREATE:
		out.Target = sqlstore.CompareCreate
		out.Number = c.GetCreateRevision()
	case pb.Compare_MOD:
		out.Target = sqlstore.CompareMod
		out.Number = c.GetModRevision()
	case pb.Compare_VALUE:
		out.Target = sqlstore.CompareValue
		out.Value = c.GetValue()
	case pb.Compare_LEASE:
		out.Target = sqlstore.CompareLease
		out.Number = c.GetLease()
	}
	return out
}

func fromTxn(r *pb.TxnRequest) *sqlstore.TxnRequest {
	t := &sqlstore.TxnRequest{}
	for _, c := range r.Compare {
		t.Compare = append(t.Compare, fromCompare(c))
	}
	t.Success = fromOps(r.Success)
	t.Failure = fromOps(r.Failure)
	return t
}

func fromOps(ops []*pb.RequestOp) []sqlstore.Op {
	out := make([]sqlstore.Op, 0, len(ops))
	for _, op := range ops {
		var o sqlstore.Op
		switch {
		case op.GetRequestRange() != nil:
			r := fromRange(op.GetRequestRange())
			o.Range = &r
		case op.GetRequestPut() != nil:
			p := fromPut(op.GetRequestPut())
			o.Put = &p
		case op.GetRequestDeleteRange() != nil:
			d := fromDelete(op.GetRequestDeleteRange())
			o.Delete = &d
		case op.GetRequestTxn() != nil:
			o.Txn = fromTxn(op.GetRequestTxn())
		default:
			continue
		}
		out = append(out, o)
	}
	return out
}

func (s *Server) rangeResponse(r *sqlstore.RangeResult) *pb.RangeResponse {
	return &pb.RangeResponse{Header: s.header(r.Revision), Kvs: toKVs(r.KVs), More: r.More, Count: r.Count}
}

func (s *Server) txnResponse(r *sqlstore.TxnResult, rev int64) *pb.TxnResponse {
	resp := &pb.TxnResponse{Header: s.header(rev), Succeeded: r.Succeeded}
	for _, res := range r.Results {
		op := &pb.ResponseOp{}
		switch {
		case res.Range != nil:
			rr := s.rangeResponse(res.Range)
			rr.Header = s.header(rev)
			op.Response = &pb.ResponseOp_ResponseRange{ResponseRange: rr}
		case res.Put != nil:
			op.Response = &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: s.header(rev), PrevKv: toKV(res.Put.PrevKV)}}
		case res.Delete != nil:
			op.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &pb.DeleteRangeResponse{
				Header: s.header(rev), Deleted: res.Delete.Deleted, PrevKvs: toKVs(res.Delete.PrevKVs)}}
		case res.Txn != nil:
			op.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: s.txnResponse(res.Txn, rev)}
		}
		resp.Responses = append(resp.Responses, op)
	}
	return resp
}
