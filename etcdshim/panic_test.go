package etcdshim_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// panicKey and panicLease make panickyBackend panic.
const (
	panicKey   = "panic"
	panicLease = 666
)

// panickyBackend is the store, but for reads and watches of panicKey and
// keepalives of panicLease, where it panics as a handler with a bug would.
type panickyBackend struct {
	etcdshim.Backend
}

func (b panickyBackend) Range(ctx context.Context, req sqlstore.RangeRequest) (*sqlstore.RangeResult, error) {
	if string(req.Key) == panicKey {
		panic("test: Range of " + panicKey)
	}
	return b.Backend.Range(ctx, req)
}

func (b panickyBackend) Watch(ctx context.Context, key, end []byte, startRev int64, deliver func(sqlstore.WatchBatch) error) (*sqlstore.Watch, error) {
	if string(key) == panicKey {
		panic("test: Watch of " + panicKey)
	}
	return b.Backend.Watch(ctx, key, end, startRev, deliver)
}

func (b panickyBackend) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	if id == panicLease {
		panic("test: keepalive of lease 666")
	}
	return b.Backend.LeaseKeepAlive(ctx, id)
}

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// counter reads one series of a counter vector from the server's registry
// (0 if it has none yet).
func (ts *testServer) counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := ts.reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestServer_RecoversHandlerPanics: a panic in a unary handler, in a
// stream's handler and in the goroutines a watch stream runs is answered
// with code Internal, logged with its method and counted, and the server
// goes on serving.
func TestServer_RecoversHandlerPanics(t *testing.T) {
	logs := &lockedBuffer{}
	ts := startServer(t, "sqlite://"+filepath.Join(t.TempDir(), "state.db"), func(o *etcdshim.Options) {
		o.Backend = panickyBackend{Backend: o.Backend}
		o.Logger = zerolog.New(logs)
	})
	conn := ts.client.ActiveConnection()
	ctx := testCtx(t)
	const metric = "sqlkube_etcd_handler_panics_total"

	t.Run("unary", func(t *testing.T) {
		_, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte(panicKey)})
		if status.Code(err) != codes.Internal {
			t.Errorf("Range of %q: %v, want code Internal", panicKey, err)
		}
		if got := ts.counter(t, metric, "method", "Range"); got != 1 {
			t.Errorf("%s{method=Range} = %v, want 1", metric, got)
		}
	})

	t.Run("stream", func(t *testing.T) {
		ka, err := pb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
		if err != nil {
			t.Fatalf("LeaseKeepAlive: %v", err)
		}
		if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: panicLease}); err != nil {
			t.Fatalf("send keepalive: %v", err)
		}
		if _, err := ka.Recv(); status.Code(err) != codes.Internal {
			t.Errorf("keepalive of lease %d: %v, want code Internal", panicLease, err)
		}
		if got := ts.counter(t, metric, "method", "LeaseKeepAlive"); got != 1 {
			t.Errorf("%s{method=LeaseKeepAlive} = %v, want 1", metric, got)
		}
	})

	// A watch's requests are handled in a goroutine of their own, which
	// recovers and ends the stream.
	t.Run("watch", func(t *testing.T) {
		ws, err := pb.NewWatchClient(conn).Watch(ctx)
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		create := &pb.WatchCreateRequest{Key: []byte(panicKey)}
		if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
			t.Fatalf("send create: %v", err)
		}
		for {
			if _, err = ws.Recv(); err != nil {
				break // before it, perhaps the created notification
			}
		}
		if status.Code(err) != codes.Internal {
			t.Errorf("watch of %q: %v, want code Internal", panicKey, err)
		}
		if got := ts.counter(t, metric, "method", "Watch"); got != 1 {
			t.Errorf("%s{method=Watch} = %v, want 1", metric, got)
		}
	})

	for _, method := range []string{"Range", "LeaseKeepAlive", "Watch"} {
		if !strings.Contains(logs.String(), `"method":"`+method+`"`) {
			t.Errorf("no log line for the panic in %s; log:\n%s", method, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "handler panicked") || !strings.Contains(logs.String(), "panic_test.go") {
		t.Errorf("log lacks the panic and its stack:\n%s", logs.String())
	}
	// The server goes on serving.
	mustPut(t, ts.client, "after", "panics")
	if got, err := ts.client.Get(ctx, "after"); err != nil || len(got.Kvs) != 1 {
		t.Errorf("Get after the panics: %v, %v", got, err)
	}
}
