package etcdshim_test

import (
	"errors"
	"io"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/sqlkube/sqlkube/etcdshim"
)

// FuzzMaintenance sends sequences of Maintenance requests (Status,
// Defragment, Alarm, Hash, HashKV, Snapshot, MoveLeader, Downgrade) and
// Cluster requests, between puts. After each input it deactivates every
// alarm the input raised, as an operator would, before the check that the
// store still serves.
func FuzzMaintenance(f *testing.F) {
	// Op bytes: 0 Status, 1 Defragment, 2 Alarm, 3 Hash, 4 HashKV,
	// 5 Snapshot, 6 MoveLeader, 7 Downgrade, 8 MemberList, 9 MemberAdd,
	// 10 MemberRemove/Update/Promote, 11 put; then each one's fields.
	f.Add([]byte{11, 0, 3, 0, 0, 1, 0, 0, 0})                                           // put a = 1 MiB; defragment; status
	f.Add([]byte{2, 1, 1, 1, 0, 2, 0, 0, 0, 0, 2, 2, 1, 1, 0})                          // raise NOSPACE for member 1; list alarms; clear it
	f.Add([]byte{2, 0xf9, 0, 0xf8, 0, 4, 1, 0})                                         // alarm action and type outside the enums; HashKV at the current revision
	f.Add([]byte{5, 0, 6, 3, 0, 7, 1, 3, 'x', '.', 'y', 0, 8, 1, 0})                    // snapshot; move the leader to MaxInt64; downgrade to x.y; member list
	f.Add([]byte{9, 2, ':', '/', 1, 0, 10, 0, 0, 10, 2, 1, 3, 'u', 'r', 'l', 10, 1, 2}) // member add, remove, update, promote
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fs.input(data)
		for i := 0; i < maxInputOps && in.more(); i++ {
			fs.fuzzMaintenanceOp(t, in)
		}
		fs.disarm(t)
		fs.sane(t)
	})
}

func (fs *fuzzServer) fuzzMaintenanceOp(t *testing.T, in *fuzzInput) {
	switch in.byte() % 12 {
	case 0:
		req := &pb.StatusRequest{}
		in.merge(req)
		if resp, ok := call(t, "Status", req, fs.mt.Status); ok {
			checkHeader(t, "Status", resp.Header)
			if resp.Version != etcdshim.Version || resp.Leader != resp.Header.MemberId || resp.DbSize <= 0 {
				t.Fatalf("Status: %v", resp)
			}
		}
	case 1:
		req := &pb.DefragmentRequest{}
		in.merge(req)
		if resp, ok := call(t, "Defragment", req, fs.mt.Defragment); ok {
			checkHeader(t, "Defragment", resp.Header)
		}
	case 2:
		req := &pb.AlarmRequest{
			Action: pb.AlarmRequest_AlarmAction(in.enum(3)), MemberID: uint64(in.number()), Alarm: pb.AlarmType(in.enum(3)),
		}
		in.merge(req)
		if resp, ok := call(t, "Alarm", req, fs.mt.Alarm); ok {
			checkHeader(t, "Alarm", resp.Header)
		}
	case 3:
		req := &pb.HashRequest{}
		in.merge(req)
		call(t, "Hash", req, fs.mt.Hash)
	case 4:
		req := &pb.HashKVRequest{Revision: in.revision()}
		in.merge(req)
		call(t, "HashKV", req, fs.mt.HashKV)
	case 5:
		fs.fuzzSnapshot(t, in)
	case 6:
		req := &pb.MoveLeaderRequest{TargetID: uint64(in.number())}
		in.merge(req)
		call(t, "MoveLeader", req, fs.mt.MoveLeader)
	case 7:
		req := &pb.DowngradeRequest{Action: pb.DowngradeRequest_DowngradeAction(in.enum(3)), Version: in.str()}
		in.merge(req)
		call(t, "Downgrade", req, fs.mt.Downgrade)
	case 8:
		req := &pb.MemberListRequest{Linearizable: in.flag()}
		in.merge(req)
		if resp, ok := call(t, "MemberList", req, fs.cluster.MemberList); ok {
			checkHeader(t, "MemberList", resp.Header)
			if len(resp.Members) != 1 || resp.Members[0].ID != resp.Header.MemberId {
				t.Fatalf("MemberList: %v, want this one member", resp)
			}
		}
	case 9:
		req := &pb.MemberAddRequest{PeerURLs: []string{in.str()}, IsLearner: in.flag()}
		in.merge(req)
		call(t, "MemberAdd", req, fs.cluster.MemberAdd)
	case 10:
		id := uint64(in.number())
		switch in.byte() % 3 {
		case 0:
			call(t, "MemberRemove", &pb.MemberRemoveRequest{ID: id}, fs.cluster.MemberRemove)
		case 1:
			call(t, "MemberUpdate", &pb.MemberUpdateRequest{ID: id, PeerURLs: []string{in.str()}}, fs.cluster.MemberUpdate)
		case 2:
			call(t, "MemberPromote", &pb.MemberPromoteRequest{ID: id}, fs.cluster.MemberPromote)
		}
	case 11:
		fs.fuzzPut(t, in, in.key())
	}
}

// fuzzSnapshot reads a snapshot, if the server serves them, to its end.
func (fs *fuzzServer) fuzzSnapshot(t *testing.T, in *fuzzInput) {
	req := &pb.SnapshotRequest{}
	in.merge(req)
	ctx, cancel := callCtx()
	defer cancel()
	stream, err := fs.mt.Snapshot(ctx, req)
	for err == nil {
		_, err = stream.Recv()
	}
	if !errors.Is(err, io.EOF) {
		checkErr(t, "Snapshot", req, err)
	}
}

// disarm deactivates every active alarm.
func (fs *fuzzServer) disarm(t *testing.T) {
	t.Helper()
	resp, ok := call(t, "Alarm", &pb.AlarmRequest{Action: pb.AlarmRequest_GET}, fs.mt.Alarm)
	if !ok {
		t.Fatal("Alarm GET failed")
	}
	for _, a := range resp.Alarms {
		req := &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: a.MemberID, Alarm: a.Alarm}
		if _, ok := call(t, "Alarm", req, fs.mt.Alarm); !ok {
			t.Fatalf("Alarm(%s) failed", describeReq(req))
		}
	}
}
