package etcdshim_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// FuzzKV sends sequences of Range, RangeStream, Put, DeleteRange and
// Compact requests.
func FuzzKV(f *testing.F) {
	// Op bytes: 0 Range, 1 Put, 2 DeleteRange, 3 Compact, 4 RangeStream;
	// then the request's fields in the order rangeRequest & co. read them.
	f.Add([]byte{1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})           // put a=v; get a
	f.Add([]byte{1, 4, 3, 0, 0, 4, 4, 2, 0, 0, 0, 0, 0, 0})           // put k/ = 1 MiB; stream the range k/..k0
	f.Add([]byte{0, 7, 1, 0, 9, 4, 0, 0, 0, 0})                       // every key from the empty key, at revision MinInt64
	f.Add([]byte{3, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0})              // compact the current revision; get a at it
	f.Add([]byte{1, 14, 0, 0, 0, 1, 9, 0xee, 0, 2, 0, 2, 5, 1, 1, 0}) // put a key past the limit; put ignore_value of a missing key; delete every key
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 0x18, 0x05})              // get a with limit 5, from raw protobuf
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fs.input(data)
		for i := 0; i < maxInputOps && in.more(); i++ {
			switch in.byte() % 5 {
			case 0:
				fs.fuzzRange(t, in)
			case 1:
				fs.fuzzPut(t, in, in.key())
			case 2:
				fs.fuzzDelete(t, in)
			case 3:
				req := &pb.CompactionRequest{Revision: in.revision(), Physical: in.flag()}
				in.merge(req)
				if resp, ok := call(t, "Compact", req, fs.kv.Compact); ok {
					checkHeader(t, "Compact", resp.Header)
				}
			case 4:
				fs.fuzzRangeStream(t, in)
			}
		}
		fs.sane(t)
	})
}

func (in *fuzzInput) rangeRequest() *pb.RangeRequest {
	key := in.key()
	req := &pb.RangeRequest{
		Key: key, RangeEnd: in.rangeEnd(key), Limit: in.number(), Revision: in.revision(),
		SortOrder:  pb.RangeRequest_SortOrder(in.enum(3)),
		SortTarget: pb.RangeRequest_SortTarget(in.enum(5)),
	}
	flags := in.byte()
	req.Serializable, req.KeysOnly, req.CountOnly = flags&1 != 0, flags&2 != 0, flags&4 != 0
	if flags&8 != 0 {
		req.MinModRevision, req.MaxModRevision = in.revision(), in.revision()
		req.MinCreateRevision, req.MaxCreateRevision = in.revision(), in.revision()
	}
	in.merge(req)
	return req
}

func (in *fuzzInput) putRequest(key []byte) *pb.PutRequest {
	req := &pb.PutRequest{Key: key, Value: in.value()}
	flags := in.byte()
	req.PrevKv, req.IgnoreValue, req.IgnoreLease = flags&1 != 0, flags&2 != 0, flags&4 != 0
	if flags&8 != 0 {
		req.Lease = in.number()
	}
	in.merge(req)
	return req
}

func (in *fuzzInput) deleteRequest() *pb.DeleteRangeRequest {
	key := in.key()
	req := &pb.DeleteRangeRequest{Key: key, RangeEnd: in.rangeEnd(key), PrevKv: in.flag()}
	in.merge(req)
	return req
}

func (fs *fuzzServer) fuzzRange(t *testing.T, in *fuzzInput) {
	req := in.rangeRequest()
	if resp, ok := call(t, "Range", req, fs.kv.Range); ok {
		checkRangeResponse(t, req, resp)
	}
}

func (fs *fuzzServer) fuzzPut(t *testing.T, in *fuzzInput, key []byte) {
	req := in.putRequest(key)
	if resp, ok := call(t, "Put", req, fs.kv.Put); ok {
		checkPutResponse(t, req, resp)
	}
}

func (fs *fuzzServer) fuzzDelete(t *testing.T, in *fuzzInput) {
	req := in.deleteRequest()
	if resp, ok := call(t, "DeleteRange", req, fs.kv.DeleteRange); ok {
		checkDeleteResponse(t, req, resp)
	}
}

// fuzzRangeStream reads a streamed range to its end and compares it with
// the same Range at the revision the stream read.
func (fs *fuzzServer) fuzzRangeStream(t *testing.T, in *fuzzInput) {
	req := in.rangeRequest()
	ctx, cancel := callCtx()
	defer cancel()
	stream, err := fs.kv.RangeStream(ctx, req)
	checkErr(t, "RangeStream", req, err)
	if err != nil {
		return
	}
	var kvs []*mvccpb.KeyValue
	var last *pb.RangeResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		checkErr(t, "RangeStream", req, err)
		if err != nil {
			return
		}
		if last != nil && last.Header != nil {
			t.Fatalf("RangeStream(%s): a chunk after the one with the header", describeReq(req))
		}
		last = resp.RangeResponse
		kvs = append(kvs, last.Kvs...)
	}
	if last == nil {
		t.Fatalf("RangeStream(%s): ended without a response", describeReq(req))
	}
	merged := &pb.RangeResponse{Header: last.Header, Kvs: kvs, More: last.More, Count: last.Count}
	checkRangeResponse(t, req, merged)
	// The same range read with Range, at the revision the stream read.
	again := proto.Clone(req).(*pb.RangeRequest)
	// A stream is in key order whatever the sort target, as etcd's; Range
	// sorts by a target other than the key even with no sort order.
	again.SortTarget = pb.RangeRequest_KEY
	if again.Revision <= 0 {
		again.Revision = merged.Header.Revision
	}
	want, err := fs.kv.Range(ctx, again)
	if err != nil {
		t.Fatalf("RangeStream(%s) succeeded, the same Range at revision %d failed: %v", describeReq(req), again.Revision, err)
	}
	if !sameKVs(merged.Kvs, want.Kvs) || merged.More != want.More || merged.Count != want.Count {
		t.Fatalf("RangeStream(%s): %d keys, more %v, count %d; Range at %d: %d keys, more %v, count %d",
			describeReq(req), len(merged.Kvs), merged.More, merged.Count, again.Revision, len(want.Kvs), want.More, want.Count)
	}
}

func sameKVs(a, b []*mvccpb.KeyValue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// inRange reports whether key is in the range key..end of a request, as
// etcd reads it.
func inRange(k, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	}
	return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
}

// checkRangeResponse checks what a successful Range answered against what
// it asked: keys in the range and within the revision filters, at most
// limit of them, ordered as asked, values only when asked for.
func checkRangeResponse(t *testing.T, req *pb.RangeRequest, resp *pb.RangeResponse) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("Range(%s): %s", describeReq(req), fmt.Sprintf(format, args...))
	}
	checkHeader(t, "Range", resp.Header)
	if req.CountOnly && len(resp.Kvs) > 0 {
		fail("count_only answered %d keys", len(resp.Kvs))
	}
	if req.Limit > 0 && int64(len(resp.Kvs)) > req.Limit {
		fail("%d keys for limit %d", len(resp.Kvs), req.Limit)
	}
	if resp.Count < int64(len(resp.Kvs)) {
		fail("count %d below the %d keys answered", resp.Count, len(resp.Kvs))
	}
	atRev := resp.Header.Revision
	if req.Revision > 0 {
		atRev = req.Revision
	}
	for i, kv := range resp.Kvs {
		switch {
		case !inRange(kv.Key, req.Key, req.RangeEnd):
			fail("key %q outside the range", kv.Key)
		case kv.ModRevision > atRev || kv.CreateRevision > kv.ModRevision || kv.Version < 1:
			fail("key %q with create %d, mod %d, version %d read at %d", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, atRev)
		case req.KeysOnly && len(kv.Value) > 0:
			fail("keys_only answered the value of %q", kv.Key)
		case req.MinModRevision > 0 && kv.ModRevision < req.MinModRevision,
			req.MaxModRevision > 0 && kv.ModRevision > req.MaxModRevision,
			req.MinCreateRevision > 0 && kv.CreateRevision < req.MinCreateRevision,
			req.MaxCreateRevision > 0 && kv.CreateRevision > req.MaxCreateRevision:
			fail("key %q (create %d, mod %d) outside the revision filters", kv.Key, kv.CreateRevision, kv.ModRevision)
		}
		if i == 0 {
			continue
		}
		c := bytes.Compare(resp.Kvs[i-1].Key, kv.Key)
		byKey := req.SortTarget == pb.RangeRequest_KEY
		switch {
		case c == 0:
			fail("key %q answered twice", kv.Key)
		case byKey && req.SortOrder != pb.RangeRequest_DESCEND && c > 0:
			fail("keys out of ascending order: %q before %q", resp.Kvs[i-1].Key, kv.Key)
		case byKey && req.SortOrder == pb.RangeRequest_DESCEND && c < 0:
			fail("keys out of descending order: %q before %q", resp.Kvs[i-1].Key, kv.Key)
		}
	}
}

func checkPutResponse(t *testing.T, req *pb.PutRequest, resp *pb.PutResponse) {
	t.Helper()
	checkHeader(t, "Put", resp.Header)
	if resp.PrevKv != nil && (!req.PrevKv || !bytes.Equal(resp.PrevKv.Key, req.Key) || resp.PrevKv.ModRevision >= resp.Header.Revision) {
		t.Fatalf("Put(%s): prev_kv %v at revision %d", describeReq(req), resp.PrevKv, resp.Header.Revision)
	}
}

func checkDeleteResponse(t *testing.T, req *pb.DeleteRangeRequest, resp *pb.DeleteRangeResponse) {
	t.Helper()
	checkHeader(t, "DeleteRange", resp.Header)
	want := int64(0)
	if req.PrevKv {
		want = resp.Deleted
	}
	if int64(len(resp.PrevKvs)) != want {
		t.Fatalf("DeleteRange(%s): %d deleted, %d previous values", describeReq(req), resp.Deleted, len(resp.PrevKvs))
	}
	for _, kv := range resp.PrevKvs {
		if !inRange(kv.Key, req.Key, req.RangeEnd) {
			t.Fatalf("DeleteRange(%s): deleted %q, outside the range", describeReq(req), kv.Key)
		}
	}
}
