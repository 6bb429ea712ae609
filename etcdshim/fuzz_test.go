package etcdshim_test

// The fuzz tests (FuzzKV, FuzzTxn, FuzzWatch, FuzzLease, FuzzMaintenance)
// send hostile requests through a real gRPC connection to a server over
// SQLite: one server per fuzzing process, in the process's temporary
// directory, kept across inputs so that one input meets the state earlier
// ones left. An input is read as a sequence of choices (fuzzInput), and
// most requests also take raw protobuf bytes from it, merged over the
// decoded fields, so that any field can take any value.
//
// For every input they check that no call fails with anything but an
// answer to bad input (checkErr: InvalidArgument, OutOfRange,
// FailedPrecondition, NotFound, ResourceExhausted, Canceled, or etcd's own
// errors; never Internal, which a recovered panic answers, nor Unknown),
// that every call answers within callTimeout, that what succeeds has the
// shape etcd gives it, and afterwards that the store still serves a put
// and a get. A panic that nothing recovers ends the fuzzing process, which
// the fuzzer reports as a failure too.
//
// make test-fuzz runs each for 20 s; docs/testing.md says how to run them
// longer.

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

const (
	// callTimeout bounds every call an input makes: a call that has not
	// answered by then is a hang, and fails the input.
	callTimeout = 10 * time.Second
	// maxInputOps bounds how many requests one input makes.
	maxInputOps = 16
	// sanityKey is what the check after every input writes and reads.
	sanityKey = "fuzz/sanity"
	// maxStoreBytes is the data above which the store is emptied after an
	// input: a txn of 128 ranges reads the store 128 times, which must
	// stay well within callTimeout.
	maxStoreBytes = 1 << 20
	// compactEvery is how many inputs pass between compactions, which
	// keep the last historyKept revisions.
	compactEvery = 64
	historyKept  = 64
)

// unimplemented lists the methods sqlkube answers with Unimplemented
// (etcd's cluster management, hashes, snapshots, leader moves, downgrades),
// the only calls for which that code is an answer.
var unimplemented = map[string]bool{
	"Hash": true, "HashKV": true, "Snapshot": true, "MoveLeader": true, "Downgrade": true,
	"MemberAdd": true, "MemberRemove": true, "MemberUpdate": true, "MemberPromote": true,
	// Custom sort orders and revision filters, as etcd.
	"RangeStream": true,
}

// fuzzServer is a store, an etcd API server over it and gRPC clients of the
// server, for one fuzzing process.
type fuzzServer struct {
	store   *sqlstore.Store
	reg     *prometheus.Registry
	kv      pb.KVClient
	watch   pb.WatchClient
	lease   pb.LeaseClient
	mt      pb.MaintenanceClient
	cluster pb.ClusterClient
	inputs  int
}

// newFuzzServer starts a server over a new SQLite store in f's temporary
// directory, stopped when the fuzz test ends. Its log shows errors only:
// a recovered panic, with its stack.
func newFuzzServer(f *testing.F) *fuzzServer {
	f.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	logger := zerolog.New(os.Stderr).Level(zerolog.ErrorLevel)
	st, err := sqlstore.Open(ctx, sqlstore.Options{DSN: "sqlite://" + filepath.Join(f.TempDir(), "state.db"), Logger: logger, Registerer: reg})
	if err != nil {
		f.Fatalf("sqlstore.Open: %v", err)
	}
	f.Cleanup(func() {
		if err := st.Close(); err != nil {
			f.Errorf("close store: %v", err)
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatalf("listen: %v", err)
	}
	srv := etcdshim.New(etcdshim.Options{
		Backend: st, Logger: logger, Name: "fuzz", ClientURLs: []string{"http://" + l.Addr().String()},
		ClusterKey: st.Describe(), Registerer: reg,
		// Often enough that watches asking for progress get some.
		ProgressNotifyInterval: 50 * time.Millisecond,
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	f.Cleanup(func() {
		srv.Stop(callTimeout)
		if err := <-served; err != nil {
			f.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Large enough that oversized requests reach the server.
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20), grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		f.Fatalf("grpc.NewClient: %v", err)
	}
	f.Cleanup(func() { _ = conn.Close() })
	return &fuzzServer{
		store: st, reg: reg,
		kv: pb.NewKVClient(conn), watch: pb.NewWatchClient(conn), lease: pb.NewLeaseClient(conn),
		mt: pb.NewMaintenanceClient(conn), cluster: pb.NewClusterClient(conn),
	}
}

// callCtx bounds one call.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// badError says what is wrong with err as the answer of method to a
// request, "" if nothing: nil, or an answer to bad input.
func badError(method string, err error) string {
	if err == nil {
		return ""
	}
	st, ok := status.FromError(err)
	if !ok {
		return "not a gRPC status"
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.NotFound,
		codes.ResourceExhausted, codes.Canceled:
		return ""
	case codes.DeadlineExceeded:
		return fmt.Sprintf("no answer within %v: a hang", callTimeout)
	case codes.Unimplemented:
		if unimplemented[method] {
			return ""
		}
		return "Unimplemented from a method sqlkube serves"
	case codes.Internal:
		return "Internal: a handler panicked (its stack is in the log above) or the transport failed"
	case codes.Unknown:
		return "Unknown: a handler returned an error that is not a gRPC status"
	case codes.Unavailable, codes.DataLoss:
		// Even etcd's own (server stopped, request timed out, corrupt):
		// a request must not make the server think that.
		return fmt.Sprintf("%s: the server failed, not the request", st.Code())
	}
	if e, ok := rpctypes.Error(err).(rpctypes.EtcdError); ok && e.Code() == st.Code() {
		return "" // etcd's own (permission denied, invalid auth token)
	}
	return fmt.Sprintf("code %s is not an answer to bad input", st.Code())
}

// checkErr fails the input if err is not nil or an answer to bad input.
func checkErr(t *testing.T, method string, req proto.Message, err error) {
	t.Helper()
	if why := badError(method, err); why != "" {
		t.Fatalf("%s(%s): %v\n%s", method, describeReq(req), err, why)
	}
}

// describeReq shows a request in a failure, shortened.
func describeReq(req proto.Message) string {
	if req == nil {
		return ""
	}
	s := fmt.Sprint(req)
	if len(s) > 2000 {
		s = s[:2000] + fmt.Sprintf("… (%d bytes)", proto.Size(req))
	}
	return s
}

// call makes one unary call under callTimeout and checks its error.
func call[Req proto.Message, Resp any](t *testing.T, method string, req Req,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, bool) {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := fn(ctx, req)
	checkErr(t, method, req, err)
	return resp, err == nil
}

// checkHeader fails the input unless a response has a header with a
// revision.
func checkHeader(t *testing.T, method string, h *pb.ResponseHeader) {
	t.Helper()
	if h == nil || h.Revision < 1 || h.ClusterId == 0 || h.MemberId == 0 {
		t.Fatalf("%s: response header %v, want one with cluster, member and revision", method, h)
	}
}

// sane runs after every input: the store must still serve a put and a
// get of sanityKey. Then it trims the store (see trim).
func (fs *fuzzServer) sane(t *testing.T) {
	t.Helper()
	fs.inputs++
	ctx, cancel := callCtx()
	defer cancel()
	val := []byte(strconv.Itoa(fs.inputs))
	put, err := fs.kv.Put(ctx, &pb.PutRequest{Key: []byte(sanityKey), Value: val})
	if err != nil {
		t.Fatalf("after the input the store does not serve: Put: %v", err)
	}
	get, err := fs.kv.Range(ctx, &pb.RangeRequest{Key: []byte(sanityKey)})
	if err != nil {
		t.Fatalf("after the input the store does not serve: Range: %v", err)
	}
	if len(get.Kvs) != 1 || !bytes.Equal(get.Kvs[0].Value, val) || get.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after the input, %s written at %d with %q reads as %v", sanityKey, put.Header.Revision, val, get.Kvs)
	}
	fs.trim(t)
}

// trim keeps the store small, so that inputs take about as long at the end
// of a long run as at its start: past maxStoreBytes of data every key is
// deleted and history compacted away, and every compactEvery inputs
// history is compacted but for its last revisions.
func (fs *fuzzServer) trim(t *testing.T) {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	size, err := fs.store.SizeInUse(ctx)
	if err != nil {
		t.Fatalf("trim: size: %v", err)
	}
	full := size > maxStoreBytes
	if !full && fs.inputs%compactEvery != 0 {
		return
	}
	if full {
		if _, err := fs.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}); err != nil {
			t.Fatalf("trim: delete every key: %v", err)
		}
	}
	cur, compacted, err := fs.store.Revisions(ctx)
	if err != nil {
		t.Fatalf("trim: revisions: %v", err)
	}
	to := cur - historyKept
	if full {
		to = cur
	}
	if to > compacted {
		if _, err := fs.kv.Compact(ctx, &pb.CompactionRequest{Revision: to}); err != nil {
			t.Fatalf("trim: compact to %d: %v", to, err)
		}
	}
}

// gauge reads a gauge of the fuzz server's registry.
func (fs *fuzzServer) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := fs.reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// awaitGauge waits up to callTimeout for a gauge to read want. Nothing
// signals the change, so it polls.
func (fs *fuzzServer) awaitGauge(t *testing.T, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		got := fs.gauge(t, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v %v after the input ended, want %v: something leaked", name, got, callTimeout, want)
		}
		<-tick.C
	}
}
