package etcdshim_test

import (
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestWatch_CreateLikeEtcd: as etcd, a create with a negative start
// revision or a range that holds no key is refused (created and
// cancelled, for watch ID -1, with etcd's reason), and a create of the
// empty key watches "\x00", the smallest key. sqlkube watched from the
// current revision, watched nothing, and watched a key no put can write.
func TestWatch_CreateLikeEtcd(t *testing.T) {
	ts := startServer(t, "sqlite://"+filepath.Join(t.TempDir(), "state.db"))
	ctx := testCtx(t)
	ws, err := pb.NewWatchClient(ts.client.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	create := func(cr *pb.WatchCreateRequest) *pb.WatchResponse {
		t.Helper()
		if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}); err != nil {
			t.Fatalf("send create: %v", err)
		}
		resp, err := ws.Recv()
		if err != nil || !resp.Created {
			t.Fatalf("create %v: %v, %v", cr, resp, err)
		}
		return resp
	}
	for _, tt := range []struct {
		name   string
		cr     *pb.WatchCreateRequest
		reason string
	}{
		{"negative start revision", &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: -1}, rpctypes.ErrCompacted.Error()},
		{"range end below the key", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}, "mvcc: watcher range is empty"},
		{"range end at the key", &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("b")}, "mvcc: watcher range is empty"},
	} {
		if resp := create(tt.cr); !resp.Canceled || resp.WatchId != -1 || resp.CancelReason != tt.reason {
			t.Errorf("%s: %v, want refused for watch -1: %q", tt.name, resp, tt.reason)
		}
	}
	resp := create(&pb.WatchCreateRequest{})
	if resp.Canceled {
		t.Fatalf("create of the empty key refused: %v", resp)
	}
	mustPut(t, ts.client, "\x00", "v")
	ev, err := ws.Recv()
	if err != nil || len(ev.Events) != 1 || string(ev.Events[0].Kv.Key) != "\x00" || ev.WatchId != resp.WatchId {
		t.Errorf("watch of the empty key after a put of \"\\x00\": %v, %v", ev, err)
	}
}
