package etcdshim_test

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/sqlkube/sqlkube/etcdshim"
)

// FuzzTxn sends a txn per input: nested, huge, with compares of every
// target and result (and values outside the enums), on keys and ranges.
func FuzzTxn(f *testing.F) {
	// Bytes as fuzzInput.txn reads them: compares (count, then each),
	// success ops, failure ops, raw protobuf.
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // if version(a) = 0 then put a else get a
	// If a value in k/.. is not v, a nested txn that puts k/1 or deletes k/..
	f.Add([]byte{1, 4, 2, 3, 3, 0, 1, 0, 1, 3, 0, 1, 1, 2, 1, 0, 0, 1, 2, 4, 2, 1, 0, 0, 0, 0})
	f.Add([]byte{0, 0xf1, 1, 1, 0, 1, 0, 0, 0, 0})               // 128 puts of distinct keys
	f.Add([]byte{0, 0xf1, 0, 1, 0, 1, 0, 0, 0, 0})               // 128 puts of one key
	f.Add([]byte{0, 0xf2, 1, 1, 0, 1, 0, 0, 0, 0})               // 129 puts
	f.Add([]byte{0, 1, 5, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // a chain of 200 nested txns
	// Lease and mod compares over ranges; an op with no request.
	f.Add([]byte{2, 4, 2, 4, 1, 0, 0, 0, 0, 1, 2, 2, 0, 1, 0, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	// A failure branch, not run, of 42 txns of 42 txns, each putting 21
	// keys or deleting 21 others: 74,088 ops in 1.2 MB, which took
	// sqlstore's overlap check over 10 s.
	f.Add([]byte{0, 0, 0xf6, 1, 3, 0, 0xf6, 1, 3, 0, 0xf5, 1, 1, 0, 1, 0, 0, 0xf5, 1, 2, 0, 0, 0, 0})
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		budget := maxFuzzTxnOps
		req := fs.input(data).txn(4, &budget)
		boundRanges(req, maxFuzzTxnRanges)
		if resp, ok := call(t, "Txn", req, fs.kv.Txn); ok {
			checkHeader(t, "Txn", resp.Header)
			checkTxnResponse(t, req, req, resp)
		}
		fs.sane(t)
	})
}

// maxFuzzTxnOps bounds the ops of one fuzzed txn, all levels together,
// and maxFuzzTxnBytes the size of one branch of repeated ops, so that
// building a txn stays cheap; both are far more than fits in a request.
// maxFuzzTxnRanges bounds the ranges of a txn that read keys (see
// boundRanges).
const (
	maxFuzzTxnOps    = 1 << 18
	maxFuzzTxnBytes  = 2 * etcdshim.MaxRequestBytes
	maxFuzzTxnRanges = 64
)

// boundRanges makes every range of a txn tree after the first n count
// keys only. A txn of 1,764 nested ranges reads the store 1,764 times (up
// to the 2 GiB a response can hold, which the store's own tests check),
// about 10 s a gigabyte on SQLite here: time spent on volume the request
// asked for, which the 10 s bound on a call would take for a hang. The
// store is under a megabyte when an input starts and a request writes at
// most 1.5 MB, so 64 ranges read at most 160 MB.
func boundRanges(t *pb.TxnRequest, n int) int {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			switch r := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if n > 0 {
					n--
					continue
				}
				rr := r.RequestRange
				rr.CountOnly, rr.SortOrder, rr.SortTarget = true, pb.RangeRequest_NONE, pb.RangeRequest_KEY
				rr.MinModRevision, rr.MaxModRevision, rr.MinCreateRevision, rr.MaxCreateRevision = 0, 0, 0, 0
			case *pb.RequestOp_RequestTxn:
				n = boundRanges(r.RequestTxn, n)
			}
		}
	}
	return n
}

// txn decodes a txn tree with up to depth levels of nesting below it;
// budget bounds its ops.
func (in *fuzzInput) txn(depth int, budget *int) *pb.TxnRequest {
	req := &pb.TxnRequest{}
	for n := in.count(); n > 0 && *budget > 0; n-- {
		req.Compare = append(req.Compare, in.compare())
		*budget--
	}
	req.Success = in.ops(depth, budget)
	req.Failure = in.ops(depth, budget)
	in.merge(req)
	return req
}

// count is a small count, or (bytes 0xf0 and up) a large one: around and
// past MaxTxnOps, or what fits in a parent's budget.
func (in *fuzzInput) count() int {
	c := in.byte()
	if c >= 0xf0 {
		return []int{127, 128, 129, 1000, 10000, 21, 42, 64}[int(c-0xf0)%8]
	}
	return int(c % 6)
}

// ops decodes a branch of n ops. A branch of more than 8 is one op
// repeated, with distinct keys or the same.
func (in *fuzzInput) ops(depth int, budget *int) []*pb.RequestOp {
	n := in.count()
	if n <= 8 {
		var ops []*pb.RequestOp
		for ; n > 0 && *budget > 0; n-- {
			ops = append(ops, in.op(depth, budget))
			*budget--
		}
		return ops
	}
	distinct := in.flag()
	op := in.op(depth, budget)
	// Past maxFuzzTxnBytes only the client's time goes up.
	n = min(n, maxFuzzTxnBytes/max(1, proto.Size(op)))
	ops := make([]*pb.RequestOp, 0, n)
	for i := 0; i < n && *budget > 0; i++ {
		o := proto.Clone(op).(*pb.RequestOp)
		if distinct {
			suffixKeys(o, fmt.Appendf(nil, "/%d", i))
		}
		ops = append(ops, o)
		*budget -= 1 + countOps(o.GetRequestTxn())
	}
	return ops
}

// suffixKeys appends suffix to the key of every range, put and delete in
// an op, nested txns too.
func suffixKeys(op *pb.RequestOp, suffix []byte) {
	switch r := op.Request.(type) {
	case *pb.RequestOp_RequestPut:
		r.RequestPut.Key = append(r.RequestPut.Key, suffix...)
	case *pb.RequestOp_RequestRange:
		r.RequestRange.Key = append(r.RequestRange.Key, suffix...)
	case *pb.RequestOp_RequestDeleteRange:
		r.RequestDeleteRange.Key = append(r.RequestDeleteRange.Key, suffix...)
	case *pb.RequestOp_RequestTxn:
		for _, ops := range [][]*pb.RequestOp{r.RequestTxn.Success, r.RequestTxn.Failure} {
			for _, o := range ops {
				suffixKeys(o, suffix)
			}
		}
	}
}

// countOps counts the compares and ops of a txn tree.
func countOps(t *pb.TxnRequest) int {
	if t == nil {
		return 0
	}
	n := len(t.Compare)
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			n += 1 + countOps(op.GetRequestTxn())
		}
	}
	return n
}

// op decodes one op: a range, put, delete, nested txn (while depth
// lasts), an op with no request, or a chain of nested txns as deep as a
// byte says (up to 510).
func (in *fuzzInput) op(depth int, budget *int) *pb.RequestOp {
	switch in.byte() % 6 {
	case 1:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: in.putRequest(in.key())}}
	case 2:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: in.deleteRequest()}}
	case 3:
		if depth > 0 {
			return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: in.txn(depth-1, budget)}}
		}
	case 4:
		return &pb.RequestOp{}
	case 5:
		levels := 2 * int(in.byte())
		inner := in.op(0, budget)
		for i := 0; i < levels && *budget > 0; i++ {
			inner = &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{inner}}}}
			*budget--
		}
		return inner
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: in.rangeRequest()}}
}

// compare decodes a compare of any target and result (or values outside
// them), on a key or a range, with a target value that mostly matches
// the target.
func (in *fuzzInput) compare() *pb.Compare {
	key := in.key()
	c := &pb.Compare{
		Key: key, RangeEnd: in.rangeEnd(key),
		Target: pb.Compare_CompareTarget(in.enum(5)),
		Result: pb.Compare_CompareResult(in.enum(4)),
	}
	union := int32(c.Target)
	if u := in.byte(); u >= 0xc0 {
		union = int32(u % 6)
	}
	switch union {
	case int32(pb.Compare_VERSION):
		c.TargetUnion = &pb.Compare_Version{Version: in.number()}
	case int32(pb.Compare_CREATE):
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: in.revision()}
	case int32(pb.Compare_MOD):
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: in.revision()}
	case int32(pb.Compare_VALUE):
		c.TargetUnion = &pb.Compare_Value{Value: in.value()}
	case int32(pb.Compare_LEASE):
		c.TargetUnion = &pb.Compare_Lease{Lease: in.number()}
	}
	in.merge(c)
	return c
}

// checkTxnResponse checks that a successful txn answered one response of
// the right kind for each op of the branch it took, nested txns too.
func checkTxnResponse(t *testing.T, top, req *pb.TxnRequest, resp *pb.TxnResponse) {
	t.Helper()
	ops := req.Success
	if !resp.Succeeded {
		ops = req.Failure
	}
	if len(resp.Responses) != len(ops) {
		t.Fatalf("Txn(%s): %d responses for %d ops (succeeded %v)", describeReq(top), len(resp.Responses), len(ops), resp.Succeeded)
	}
	for i, op := range ops {
		r := resp.Responses[i]
		ok := false
		switch o := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if rr := r.GetResponseRange(); rr != nil {
				checkRangeResponse(t, o.RequestRange, rr)
				ok = true
			}
		case *pb.RequestOp_RequestPut:
			ok = r.GetResponsePut() != nil
		case *pb.RequestOp_RequestDeleteRange:
			if dr := r.GetResponseDeleteRange(); dr != nil {
				checkDeleteResponse(t, o.RequestDeleteRange, dr)
				ok = true
			}
		case *pb.RequestOp_RequestTxn:
			if tr := r.GetResponseTxn(); tr != nil {
				checkTxnResponse(t, top, o.RequestTxn, tr)
				ok = true
			}
		}
		if !ok {
			t.Fatalf("Txn(%s): response %d is %T for %T", describeReq(top), i, r.Response, op.Request)
		}
	}
}
