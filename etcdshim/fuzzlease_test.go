package etcdshim_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// FuzzLease sends sequences of lease grants, revokes, keepalives (on a
// stream), time-to-live and list requests with odd IDs and TTLs, and puts
// that attach keys to leases.
func FuzzLease(f *testing.F) {
	// Op bytes: 0 grant, 1 revoke, 2 time-to-live, 3 list, 4 keepalive,
	// 5 put with a lease; then each one's fields.
	// Grant with TTL 60; put a with it; keep it alive twice; revoke it; its
	// time to live.
	f.Add([]byte{0, 0, 0, 0, 5, 0, 1, 1, 0, 4, 1, 1, 0, 1, 0, 1, 1, 0, 2, 1, 1, 0})
	f.Add([]byte{0, 3, 3, 0, 0, 3, 3, 0, 2, 2, 0, 0})                                  // grant ID MaxInt64 with TTL MinInt64, twice; time to live of -1
	f.Add([]byte{0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 4, 3, 2, 0, 3, 0, 4, 0, 5, 7, 0}) // TTLs at and past etcd's limit; keepalives of odd IDs
	f.Add([]byte{1, 2, 0, 1, 4, 0, 3, 0})                                              // revoke -1 and MinInt64; list
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fs.input(data)
		var granted []int64
		for i := 0; i < maxInputOps && in.more(); i++ {
			switch in.byte() % 6 {
			case 0:
				req := &pb.LeaseGrantRequest{ID: in.leaseID(granted), TTL: in.ttl()}
				in.merge(req)
				if resp, ok := call(t, "LeaseGrant", req, fs.lease.LeaseGrant); ok {
					checkGrant(t, req, resp)
					granted = append(granted, resp.ID)
				}
			case 1:
				req := &pb.LeaseRevokeRequest{ID: in.leaseID(granted)}
				in.merge(req)
				if resp, ok := call(t, "LeaseRevoke", req, fs.lease.LeaseRevoke); ok {
					checkHeader(t, "LeaseRevoke", resp.Header)
					// A revoked lease is gone.
					ttl, ok := call(t, "LeaseTimeToLive", &pb.LeaseTimeToLiveRequest{ID: req.ID}, fs.lease.LeaseTimeToLive)
					if ok && ttl.TTL != -1 {
						t.Fatalf("lease %d revoked, then its time to live is %v", req.ID, ttl)
					}
				}
			case 2:
				req := &pb.LeaseTimeToLiveRequest{ID: in.leaseID(granted), Keys: in.flag()}
				in.merge(req)
				if resp, ok := call(t, "LeaseTimeToLive", req, fs.lease.LeaseTimeToLive); ok {
					checkTimeToLive(t, req, resp)
				}
			case 3:
				req := &pb.LeaseLeasesRequest{}
				in.merge(req)
				if resp, ok := call(t, "LeaseLeases", req, fs.lease.LeaseLeases); ok {
					checkHeader(t, "LeaseLeases", resp.Header)
					seen := map[int64]bool{}
					for _, l := range resp.Leases {
						if l.ID == 0 || seen[l.ID] {
							t.Fatalf("LeaseLeases: lease ID %d zero or listed twice", l.ID)
						}
						seen[l.ID] = true
					}
				}
			case 4:
				fs.fuzzKeepAlive(t, in, granted)
			case 5:
				key := in.key()
				put := &pb.PutRequest{Key: key, Value: in.value(), Lease: in.leaseID(granted)}
				in.merge(put)
				if _, ok := call(t, "Put", put, fs.kv.Put); ok && put.Lease != 0 && !put.IgnoreLease {
					// The key is the lease's, while the lease lives.
					req := &pb.LeaseTimeToLiveRequest{ID: put.Lease, Keys: true}
					if resp, ok := call(t, "LeaseTimeToLive", req, fs.lease.LeaseTimeToLive); ok && resp.TTL > 0 && !hasKey(resp.Keys, put.Key) {
						t.Fatalf("Put(%s) succeeded; lease %d lists keys %q", describeReq(put), put.Lease, resp.Keys)
					}
				}
			}
		}
		// The input's leases go, so that they do not pile up in the store.
		for _, id := range granted {
			call(t, "LeaseRevoke", &pb.LeaseRevokeRequest{ID: id}, fs.lease.LeaseRevoke)
		}
		fs.sane(t)
	})
}

func hasKey(keys [][]byte, k []byte) bool {
	for _, key := range keys {
		if bytes.Equal(key, k) {
			return true
		}
	}
	return false
}

// leaseID is none, one this input granted, or an odd one.
func (in *fuzzInput) leaseID(granted []int64) int64 {
	switch in.byte() % 7 {
	case 0:
		return 0
	case 1:
		if len(granted) > 0 {
			return granted[len(granted)-1]
		}
		return 0
	case 2:
		return -1
	case 3:
		return math.MaxInt64
	case 4:
		return math.MinInt64
	case 5:
		return int64(in.byte())
	}
	return in.number()
}

// ttl is a TTL at the edges (none, negative, etcd's limit and past it)
// or any.
func (in *fuzzInput) ttl() int64 {
	switch in.byte() % 8 {
	case 0:
		return 60
	case 1:
		return 1
	case 2:
		return 0
	case 3:
		return math.MinInt64
	case 4:
		return sqlstore.MaxLeaseTTL
	case 5:
		return sqlstore.MaxLeaseTTL + 1
	case 6:
		return math.MaxInt64
	}
	return in.number()
}

func checkGrant(t *testing.T, req *pb.LeaseGrantRequest, resp *pb.LeaseGrantResponse) {
	t.Helper()
	checkHeader(t, "LeaseGrant", resp.Header)
	switch {
	case resp.ID == 0, req.ID != 0 && resp.ID != req.ID:
		t.Fatalf("LeaseGrant(%s): granted ID %d", describeReq(req), resp.ID)
	case resp.TTL < 1 || resp.TTL > sqlstore.MaxLeaseTTL || resp.TTL < req.TTL:
		t.Fatalf("LeaseGrant(%s): granted TTL %d", describeReq(req), resp.TTL)
	}
}

func checkTimeToLive(t *testing.T, req *pb.LeaseTimeToLiveRequest, resp *pb.LeaseTimeToLiveResponse) {
	t.Helper()
	checkHeader(t, "LeaseTimeToLive", resp.Header)
	switch {
	case resp.ID != req.ID:
		t.Fatalf("LeaseTimeToLive(%s): answered for lease %d", describeReq(req), resp.ID)
	case resp.TTL < -1, resp.TTL > resp.GrantedTTL && resp.TTL != -1:
		t.Fatalf("LeaseTimeToLive(%s): TTL %d of %d granted", describeReq(req), resp.TTL, resp.GrantedTTL)
	case len(resp.Keys) > 0 && (!req.Keys || resp.TTL == -1):
		t.Fatalf("LeaseTimeToLive(%s): keys %q", describeReq(req), resp.Keys)
	}
}

// fuzzKeepAlive renews leases on one keepalive stream: each request is
// answered for its lease, in order, and the stream ends cleanly when the
// client closes it.
func (fs *fuzzServer) fuzzKeepAlive(t *testing.T, in *fuzzInput, granted []int64) {
	ctx, cancel := callCtx()
	defer cancel()
	stream, err := fs.lease.LeaseKeepAlive(ctx)
	checkErr(t, "LeaseKeepAlive", nil, err)
	if err != nil {
		return
	}
	for n := 1 + in.byte()%4; n > 0; n-- {
		req := &pb.LeaseKeepAliveRequest{ID: in.leaseID(granted)}
		in.merge(req)
		if err := stream.Send(req); err != nil {
			_, err = stream.Recv() // the reason
			checkErr(t, "LeaseKeepAlive", req, err)
			return
		}
		resp, err := stream.Recv()
		checkErr(t, "LeaseKeepAlive", req, err)
		if err != nil {
			return
		}
		checkHeader(t, "LeaseKeepAlive", resp.Header)
		if resp.ID != req.ID || resp.TTL < 0 {
			t.Fatalf("LeaseKeepAlive(%s): answered %v", describeReq(req), resp)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("LeaseKeepAlive: CloseSend: %v", err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		checkErr(t, "LeaseKeepAlive", nil, err)
		if err == nil {
			t.Fatal("LeaseKeepAlive: a response after the client closed the stream")
		}
	}
}
