package etcdshim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// waitFor bounds every awaited condition; nothing sleeps for a fixed time.
const waitFor = 15 * time.Second

// stopTimeout is how long Stop lets calls in flight finish.
const stopTimeout = 10 * time.Second

// testServer is a store and an etcd API server on a local port, with a
// client connected to it.
type testServer struct {
	store  *sqlstore.Store
	srv    *etcdshim.Server
	reg    *prometheus.Registry
	addr   string
	client *clientv3.Client
	// base is the store's revision when the test began; the n-th write
	// of a test is at revision base+n.
	base    int64
	served  chan error // Serve's result
	stopped bool
}

// stop stops the server (once) and returns how long Stop took.
func (ts *testServer) stop(t *testing.T) time.Duration {
	t.Helper()
	if ts.stopped {
		return 0
	}
	ts.stopped = true
	start := time.Now()
	ts.srv.Stop(stopTimeout)
	took := time.Since(start)
	if err := <-ts.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	return took
}

// rev is the revision of the test's n-th write.
func (ts *testServer) rev(n int64) int64 { return ts.base + n }

// startServer serves the etcd API over a new store on dsn until the test
// ends. opts may adjust the server's options.
func startServer(t *testing.T, dsn string, opts ...func(*etcdshim.Options)) *testServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("sqlstore.Open(%s): %v", dsn, err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ts := &testServer{store: st, reg: prometheus.NewRegistry(), addr: l.Addr().String()}
	o := etcdshim.Options{Backend: st, Logger: zerolog.Nop(), Name: "test", ClientURLs: []string{"http://" + ts.addr},
		ClusterKey: st.Describe(), Registerer: ts.reg}
	for _, f := range opts {
		f(&o)
	}
	ts.srv = etcdshim.New(o)
	ts.served = make(chan error, 1)
	go func() { ts.served <- ts.srv.Serve(l) }()
	t.Cleanup(func() { ts.stop(t) })
	ts.client = newClient(t, ts.addr)
	resp, err := ts.client.Get(ctx, "base-revision-probe")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	ts.base = resp.Header.Revision
	return ts
}

// newClient connects a clientv3 client, closed when the test ends.
func newClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		// Large enough that oversized requests reach the server.
		MaxCallSendMsgSize: 16 << 20,
	})
	if err != nil {
		t.Fatalf("clientv3.New(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, c *clientv3.Client, key, val string, opts ...clientv3.OpOption) *clientv3.PutResponse {
	t.Helper()
	resp, err := c.Put(testCtx(t), key, val, opts...)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return resp
}

func mustDelete(t *testing.T, c *clientv3.Client, key string, opts ...clientv3.OpOption) *clientv3.DeleteResponse {
	t.Helper()
	resp, err := c.Delete(testCtx(t), key, opts...)
	if err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	return resp
}

// awaitCreated reads the created notification of a watch opened with
// WithCreatedNotify.
func awaitCreated(t *testing.T, wch clientv3.WatchChan) {
	t.Helper()
	select {
	case resp, ok := <-wch:
		if !ok || !resp.Created || resp.Err() != nil {
			t.Fatalf("watch not created: ok %v, %+v, err %v", ok, resp, resp.Err())
		}
	case <-time.After(waitFor):
		t.Fatalf("no created notification within %v", waitFor)
	}
}

// collect reads n events from wch, failing on an error, a closed channel,
// or the deadline.
func collect(t *testing.T, wch clientv3.WatchChan, n int) []*clientv3.Event {
	t.Helper()
	var events []*clientv3.Event
	deadline := time.After(waitFor)
	for len(events) < n {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(events), n)
			}
			if err := resp.Err(); err != nil {
				t.Fatalf("watch failed after %d of %d events: %v", len(events), n, err)
			}
			events = append(events, resp.Events...)
		case <-deadline:
			t.Fatalf("got %d of %d events within %v: %v", len(events), n, waitFor, describe(events))
		}
	}
	if len(events) != n {
		t.Fatalf("got %d events, want %d: %v", len(events), n, describe(events))
	}
	return events
}

// eventString describes an event compactly: "PUT k=v@n" or "DELETE k@n",
// with "(prev v@n)" when it carries the previous value; n is a revision
// minus base.
func eventString(base int64, e *clientv3.Event) string {
	var s string
	if e.Type == mvccpb.Event_DELETE {
		s = fmt.Sprintf("DELETE %s@%d", e.Kv.Key, e.Kv.ModRevision-base)
	} else {
		s = fmt.Sprintf("PUT %s=%s@%d", e.Kv.Key, e.Kv.Value, e.Kv.ModRevision-base)
	}
	if e.PrevKv != nil {
		s += fmt.Sprintf(" (prev %s@%d)", e.PrevKv.Value, e.PrevKv.ModRevision-base)
	}
	return s
}

func describe(events []*clientv3.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = eventString(0, e)
	}
	return out
}

// ev describes an event with its revision as the test's n-th write.
func (ts *testServer) ev(e *clientv3.Event) string { return eventString(ts.base, e) }

// wantEvents compares events with descriptions whose revisions count the
// test's writes (@1 is its first write).
func (ts *testServer) wantEvents(t *testing.T, what string, got []*clientv3.Event, want ...string) {
	t.Helper()
	g := make([]string, len(got))
	for i, e := range got {
		g[i] = ts.ev(e)
	}
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot  %q\nwant %q", what, g, want)
	}
}

// gauge reads a gauge from the server's registry.
func (ts *testServer) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := ts.reg.Gather()
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

func TestWatch_ManyOnOneStream(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		wa := c.Watch(ctx, "a/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		wb := c.Watch(ctx, "b/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		ctx1, cancel1 := context.WithCancel(ctx)
		defer cancel1()
		w1 := c.Watch(ctx1, "a/1", clientv3.WithCreatedNotify())
		for _, w := range []clientv3.WatchChan{wa, wb, w1} {
			awaitCreated(t, w)
		}
		if n := ts.gauge(t, "sqlkube_etcd_watch_streams"); n != 1 {
			t.Errorf("%v watch streams open for three watches with one context, want 1", n)
		}

		mustPut(t, c, "a/1", "x") // 1
		mustPut(t, c, "b/1", "y") // 2
		mustPut(t, c, "a/2", "z") // 3
		ts.wantEvents(t, "watch a/", collect(t, wa, 2), "PUT a/1=x@1", "PUT a/2=z@3")
		ts.wantEvents(t, "watch b/", collect(t, wb, 1), "PUT b/1=y@2")
		ts.wantEvents(t, "watch a/1", collect(t, w1, 1), "PUT a/1=x@1")

		// Cancelling one watch closes its channel and leaves the others.
		cancel1()
		deadline := time.After(waitFor)
	drain:
		for {
			select {
			case resp, ok := <-w1:
				if !ok {
					break drain
				}
				if len(resp.Events) > 0 {
					t.Errorf("cancelled watch got events %v", describe(resp.Events))
				}
			case <-deadline:
				t.Fatalf("cancelled watch not closed within %v", waitFor)
			}
		}
		mustPut(t, c, "a/1", "x2") // 4
		mustPut(t, c, "b/2", "y2") // 5
		ts.wantEvents(t, "watch a/ after cancel", collect(t, wa, 1), "PUT a/1=x2@4")
		ts.wantEvents(t, "watch b/ after cancel", collect(t, wb, 1), "PUT b/2=y2@5")
		if n := ts.gauge(t, "sqlkube_etcd_watch_streams"); n != 1 {
			t.Errorf("%v watch streams open after a cancel, want 1", n)
		}
	})
}

func TestWatch_StartRevisionFiltersPrevKV(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		mustPut(t, c, "k/a", "1")  // 1
		mustPut(t, c, "k/b", "2")  // 2
		mustPut(t, c, "k/a", "3")  // 3
		mustDelete(t, c, "k/b")    // 4
		mustPut(t, c, "other", "") // 5

		ts.wantEvents(t, "WithRev(2) WithPrefix", collect(t, c.Watch(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(2))), 3),
			"PUT k/b=2@2", "PUT k/a=3@3", "DELETE k/b@4")
		ts.wantEvents(t, "WithRev(1) WithPrevKV", collect(t, c.Watch(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(1)), clientv3.WithPrevKV()), 4),
			"PUT k/a=1@1", "PUT k/b=2@2", "PUT k/a=3@3 (prev 1@1)", "DELETE k/b@4 (prev 2@2)")
		ts.wantEvents(t, "WithRange", collect(t, c.Watch(ctx, "k/a", clientv3.WithRange("k/b"), clientv3.WithRev(ts.rev(1))), 2),
			"PUT k/a=1@1", "PUT k/a=3@3")
		ts.wantEvents(t, "WithFromKey", collect(t, c.Watch(ctx, "k/b", clientv3.WithFromKey(), clientv3.WithRev(ts.rev(2))), 3),
			"PUT k/b=2@2", "DELETE k/b@4", "PUT other=@5")

		// Filters: after the live writes, the last event proves nothing
		// filtered came in between.
		noPut := c.Watch(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(1)), clientv3.WithFilterPut())
		noDel := c.Watch(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(1)), clientv3.WithFilterDelete())
		mustPut(t, c, "k/c", "4") // 6
		mustDelete(t, c, "k/c")   // 7
		mustPut(t, c, "k/d", "5") // 8
		ts.wantEvents(t, "WithFilterPut", collect(t, noPut, 2), "DELETE k/b@4", "DELETE k/c@7")
		ts.wantEvents(t, "WithFilterDelete", collect(t, noDel, 5), "PUT k/a=1@1", "PUT k/b=2@2", "PUT k/a=3@3", "PUT k/c=4@6", "PUT k/d=5@8")

		// A txn's events share its revision and arrive together.
		w := c.Watch(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(9)), clientv3.WithPrevKV())
		if _, err := c.Txn(ctx).Then(clientv3.OpPut("k/a", "6"), clientv3.OpDelete("k/d"), clientv3.OpPut("k/e", "7")).Commit(); err != nil {
			t.Fatalf("Txn: %v", err)
		}
		select {
		case resp := <-w:
			ts.wantEvents(t, "txn events", resp.Events, "PUT k/a=6@9 (prev 3@3)", "DELETE k/d@9 (prev 5@8)", "PUT k/e=7@9")
		case <-time.After(waitFor):
			t.Fatal("no txn events")
		}
	})
}

func TestWatch_Progress(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		w := c.Watch(ctx, "p/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		other := c.Watch(ctx, "nothing/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		awaitCreated(t, w)
		awaitCreated(t, other)
		var last int64
		for i := 0; i < 20; i++ {
			last = mustPut(t, c, fmt.Sprintf("p/%02d", i), "v").Header.Revision
			last = mustPut(t, c, fmt.Sprintf("q/%02d", i), "v").Header.Revision
		}
		if err := c.RequestProgress(ctx); err != nil {
			t.Fatalf("RequestProgress: %v", err)
		}
		// Every event up to the last write comes before the notification.
		var events []*clientv3.Event
		deadline := time.After(waitFor)
	events:
		for {
			select {
			case resp := <-w:
				if err := resp.Err(); err != nil {
					t.Fatalf("watch: %v", err)
				}
				if resp.IsProgressNotify() {
					if resp.Header.Revision < last {
						t.Errorf("progress notification at %d, want >= %d (the last write)", resp.Header.Revision, last)
					}
					break events
				}
				events = append(events, resp.Events...)
			case <-deadline:
				t.Fatalf("no progress notification within %v (%d events)", waitFor, len(events))
			}
		}
		if len(events) != 20 {
			t.Errorf("%d events before the progress notification, want 20: %v", len(events), describe(events))
		}
		// The other watch on the stream gets the notification too.
		select {
		case resp := <-other:
			if !resp.IsProgressNotify() || resp.Header.Revision < last {
				t.Errorf("other watch got %+v, want a progress notification at >= %d", resp, last)
			}
		case <-time.After(waitFor):
			t.Fatal("other watch got no progress notification")
		}
	})
}

func TestWatch_ProgressNotifyInterval(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t), func(o *etcdshim.Options) { o.ProgressNotifyInterval = 100 * time.Millisecond })
		c := ts.client
		ctx := testCtx(t)
		w := c.Watch(ctx, "idle/", clientv3.WithPrefix(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
		quiet := c.Watch(ctx, "idle/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		awaitCreated(t, w)
		awaitCreated(t, quiet)
		last := mustPut(t, c, "busy", "1").Header.Revision
		deadline := time.After(waitFor)
		for done := false; !done; {
			select {
			case resp := <-w:
				if !resp.IsProgressNotify() {
					t.Fatalf("idle watch got %+v, want progress notifications", resp)
				}
				done = resp.Header.Revision >= last
			case <-deadline:
				t.Fatalf("no progress notification at >= %d within %v", last, waitFor)
			}
		}
		// A watch that did not ask gets none; a write after the
		// notifications shows up as its next response.
		mustPut(t, c, "idle/x", "1")
		select {
		case resp := <-quiet:
			ts.wantEvents(t, "watch without progress notify", resp.Events, fmt.Sprintf("PUT idle/x=1@%d", last+1-ts.base))
		case <-time.After(waitFor):
			t.Fatal("no event")
		}
	})
}

func TestWatch_FragmentLargeRevision(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		// 300 keys of 10 KiB: written in three txns (one request may hold
		// 1.5 MiB and 128 ops), then deleted at one revision whose events
		// with previous values are about 3 MiB.
		const n, size = 300, 10 << 10
		val := strings.Repeat("v", size)
		for start := 0; start < n; start += 100 {
			var ops []clientv3.Op
			for i := start; i < start+100; i++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("f/%03d", i), val))
			}
			if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatalf("Txn of 100 puts: %v", err)
			}
		}
		// Fragmenting watches on one stream, one that does not fragment,
		// and a raw stream to see the fragments themselves. Several
		// watches give their responses a chance to come between the
		// fragments of another's.
		watches := map[string]clientv3.WatchChan{
			"whole": c.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(4)), clientv3.WithPrevKV()),
		}
		for i := 0; i < 4; i++ {
			watches[fmt.Sprint("fragment ", i)] = c.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(4)), clientv3.WithPrevKV(), clientv3.WithFragment())
		}
		const rawWatches = 3
		raw, err := pb.NewWatchClient(c.ActiveConnection()).Watch(ctx)
		if err != nil {
			t.Fatalf("raw watch: %v", err)
		}
		for i := 0; i < rawWatches; i++ {
			if err := raw.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
				Key: []byte("f/"), RangeEnd: []byte("f0"), StartRevision: ts.rev(4), PrevKv: true, Fragment: true,
			}}}); err != nil {
				t.Fatalf("raw watch create: %v", err)
			}
			if resp, err := raw.Recv(); err != nil || !resp.Created || len(resp.Events) != 0 {
				t.Fatalf("raw watch create: err %v, want a created response", err)
			}
		}

		if resp := mustDelete(t, c, "f/", clientv3.WithPrefix()); resp.Deleted != n || resp.Header.Revision != ts.rev(4) {
			t.Fatalf("delete: %d keys at %d, want %d at 4", resp.Deleted, resp.Header.Revision, n)
		}
		for name, w := range watches {
			select {
			case resp := <-w:
				if err := resp.Err(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(resp.Events) != n {
					t.Fatalf("%s: %d events in the response, want all %d", name, len(resp.Events), n)
				}
				for i, e := range resp.Events {
					if e.Type != mvccpb.Event_DELETE || string(e.Kv.Key) != fmt.Sprintf("f/%03d", i) || e.Kv.ModRevision != ts.rev(4) ||
						e.PrevKv == nil || len(e.PrevKv.Value) != size {
						t.Fatalf("%s: event %d is %s, want DELETE f/%03d@4 with its previous value", name, i, ts.ev(e), i)
					}
				}
			case <-time.After(waitFor):
				t.Fatalf("%s: no events within %v", name, waitFor)
			}
		}

		// On the raw stream the fragments of one watch's revision are
		// consecutive: clientv3 drops events when another watch's response
		// comes between them.
		got := map[int64]int{}
		fragments := map[int64]int{}
		pending := int64(-1) // a watch whose revision is half sent
		rawDone := func() bool {
			for id := int64(0); id < rawWatches; id++ {
				if got[id] < n {
					return false
				}
			}
			return true
		}
		for !rawDone() {
			resp, err := raw.Recv()
			if err != nil {
				t.Fatalf("raw watch after %v events: %v", got, err)
			}
			id := resp.WatchId
			if pending >= 0 && id != pending {
				t.Fatalf("response of watch %d between fragments of watch %d", id, pending)
			}
			got[id] += len(resp.Events)
			fragments[id]++
			if n := proto.Size(resp); n > etcdshim.MaxRequestBytes+64<<10 {
				t.Errorf("fragment of %d bytes, want about %d at most", n, etcdshim.MaxRequestBytes)
			}
			if last := got[id] >= n; resp.Fragment == last {
				t.Errorf("watch %d: fragment %d (%d events so far of %d) has Fragment=%v", id, fragments[id], got[id], n, resp.Fragment)
			}
			pending = -1
			if resp.Fragment {
				pending = id
			}
		}
		for id := int64(0); id < rawWatches; id++ {
			if got[id] != n || fragments[id] < 2 {
				t.Errorf("raw watch %d: %d events in %d responses, want %d in at least 2 fragments", id, got[id], fragments[id], n)
			}
		}
		_ = raw.CloseSend()

		// Large events of many revisions are not fragmented but split at
		// revision boundaries; everything still arrives.
		w := c.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(ts.rev(1)))
		for i, e := range collect(t, w, 2*n) {
			want := fmt.Sprintf("PUT f/%03d=%s@%d", i, val, 1+i/100)
			if i >= n {
				want = fmt.Sprintf("DELETE f/%03d@4", i-n)
			}
			if got := ts.ev(e); got != want {
				t.Fatalf("event %d is %.40s…, want %.40s…", i, got, want)
			}
		}
	})
}

func TestWatch_Compacted(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		for i := 1; i <= 5; i++ {
			mustPut(t, c, "c/a", fmt.Sprint(i))
		}
		if _, err := c.Compact(ctx, ts.rev(3)); err != nil {
			t.Fatalf("Compact(3): %v", err)
		}
		w := c.Watch(ctx, "c/a", clientv3.WithRev(ts.rev(2)))
		select {
		case resp, ok := <-w:
			if !ok {
				t.Fatal("watch closed without a response")
			}
			if resp.CompactRevision != ts.rev(3) || !errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				t.Errorf("watch from 2 after compacting at 3: compact revision %d, err %v; want 3, %v", resp.CompactRevision, resp.Err(), rpctypes.ErrCompacted)
			}
		case <-time.After(waitFor):
			t.Fatal("no response")
		}
		select {
		case resp, ok := <-w:
			if ok {
				t.Errorf("compacted watch still open: %+v", resp)
			}
		case <-time.After(waitFor):
			t.Fatal("compacted watch not closed")
		}
		ts.wantEvents(t, "watch above the compacted revision", collect(t, c.Watch(ctx, "c/a", clientv3.WithRev(ts.rev(4))), 2), "PUT c/a=4@4", "PUT c/a=5@5")
		if _, err := c.Get(ctx, "c/a", clientv3.WithRev(ts.rev(2))); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("Get at 2: %v, want %v", err, rpctypes.ErrCompacted)
		}
		if _, err := c.Compact(ctx, ts.rev(2)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("Compact(2) after 3: %v, want %v", err, rpctypes.ErrCompacted)
		}
		if _, err := c.Compact(ctx, ts.rev(6)); !errors.Is(err, rpctypes.ErrFutureRev) {
			t.Errorf("Compact(6) at 5: %v, want %v", err, rpctypes.ErrFutureRev)
		}
	})
}

func TestKV_RequestTooLarge(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		local := ts.srv.LocalClient()
		t.Cleanup(func() { _ = local.Close() })
		ctx := testCtx(t)
		// Remote and in-process clients meet the same limit.
		for name, c := range map[string]*clientv3.Client{"grpc": ts.client, "local": local} {
			// Over the 1.5 MiB limit but within gRPC's allowance: etcd's error.
			_, err := c.Put(ctx, "big", strings.Repeat("x", etcdshim.MaxRequestBytes+1024))
			if !errors.Is(err, rpctypes.ErrRequestTooLarge) || err.Error() != "etcdserver: request is too large" {
				t.Errorf("%s: Put of 1.5 MiB + 1 KiB: %v, want %v", name, err, rpctypes.ErrRequestTooLarge)
			}
			var ops []clientv3.Op
			for i := 0; i < 4; i++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprint("big/", i), strings.Repeat("x", 400<<10)))
			}
			if _, err := c.Txn(ctx).Then(ops...).Commit(); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
				t.Errorf("%s: Txn of 1.6 MiB: %v, want %v", name, err, rpctypes.ErrRequestTooLarge)
			}
			// 2 MiB is past etcd's own gRPC limit, but sqlkube's gRPC accepts
			// up to 8 MiB so that it, too, gets etcd's error rather than a
			// bare ResourceExhausted.
			_, err = c.Put(ctx, "big", strings.Repeat("x", 2<<20))
			if !errors.Is(err, rpctypes.ErrRequestTooLarge) {
				t.Errorf("%s: Put of 2 MiB: %v, want %v", name, err, rpctypes.ErrRequestTooLarge)
			}
		}
		// Past the gRPC limit, gRPC itself refuses it; in-process there is no
		// transport limit, only etcd's.
		_, err := ts.client.Put(ctx, "big", strings.Repeat("x", 9<<20))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("grpc: Put of 9 MiB: %v, want ResourceExhausted", err)
		}
		_, err = local.Put(ctx, "big", strings.Repeat("x", 9<<20))
		if !errors.Is(err, rpctypes.ErrRequestTooLarge) {
			t.Errorf("local: Put of 9 MiB: %v, want %v", err, rpctypes.ErrRequestTooLarge)
		}
		// The server keeps serving, and nothing was written.
		c := ts.client
		resp := mustPut(t, c, "small", "ok")
		if resp.Header.Revision != ts.rev(1) {
			t.Errorf("first write at revision %d, want %d", resp.Header.Revision, ts.rev(1))
		}
		get, err := c.Get(ctx, "big", clientv3.WithPrefix())
		if err != nil || get.Count != 0 {
			t.Errorf("Get big: %v, %v; want nothing", get, err)
		}
		// Just under the limit is fine.
		mustPut(t, c, "fits", strings.Repeat("x", etcdshim.MaxRequestBytes-1024))
	})
}

func TestKV_Txn(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		mustPut(t, c, "n/a", "1") // 1

		nested := func(cmpB clientv3.Cmp) *clientv3.TxnResponse {
			t.Helper()
			resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value("n/a"), "=", "1")).Then(
				clientv3.OpTxn([]clientv3.Cmp{cmpB},
					[]clientv3.Op{clientv3.OpPut("n/b", "x"), clientv3.OpGet("n/", clientv3.WithPrefix())},
					[]clientv3.Op{clientv3.OpPut("n/fail", "y"), clientv3.OpGet("n/b")}),
				clientv3.OpPut("n/c", "z"),
			).Else(clientv3.OpPut("n/outer-fail", "1")).Commit()
			if err != nil {
				t.Fatalf("nested Txn: %v", err)
			}
			return resp
		}
		resp := nested(clientv3.Compare(clientv3.Version("n/b"), "=", 0))
		if !resp.Succeeded || resp.Header.Revision != ts.rev(2) || len(resp.Responses) != 2 {
			t.Fatalf("nested txn: %v", resp)
		}
		inner := resp.Responses[0].GetResponseTxn()
		if inner == nil || !inner.Succeeded || len(inner.Responses) != 2 {
			t.Fatalf("inner txn: %v", inner)
		}
		// The inner get sees the inner put of the same txn.
		rng := inner.Responses[1].GetResponseRange()
		var got []string
		for _, kv := range rng.Kvs {
			got = append(got, fmt.Sprintf("%s=%s@%d", kv.Key, kv.Value, kv.ModRevision-ts.base))
		}
		if strings.Join(got, ",") != "n/a=1@1,n/b=x@2" {
			t.Errorf("inner get: %v, want n/a=1@1,n/b=x@2", got)
		}
		get, err := c.Get(ctx, "n/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, kv := range get.Kvs {
			got = append(got, fmt.Sprintf("%s=%s@%d", kv.Key, kv.Value, kv.ModRevision-ts.base))
		}
		if strings.Join(got, ",") != "n/a=1@1,n/b=x@2,n/c=z@2" {
			t.Errorf("after nested txn: %v", got)
		}

		// The inner compare fails now: its else branch runs.
		resp = nested(clientv3.Compare(clientv3.Version("n/b"), "=", 0))
		inner = resp.Responses[0].GetResponseTxn()
		if !resp.Succeeded || inner.Succeeded || resp.Header.Revision != ts.rev(3) {
			t.Fatalf("second nested txn: %v", resp)
		}
		if kvs := inner.Responses[1].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "x" {
			t.Errorf("inner else get: %v", kvs)
		}

		// Two writes of one key in a txn are refused, nested or not.
		_, err = c.Txn(ctx).Then(clientv3.OpPut("n/d", "1"), clientv3.OpPut("n/d", "2")).Commit()
		if !errors.Is(err, rpctypes.ErrDuplicateKey) {
			t.Errorf("txn writing a key twice: %v, want %v", err, rpctypes.ErrDuplicateKey)
		}
		_, err = c.Txn(ctx).Then(clientv3.OpPut("n/d", "1"), clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete("n/", clientv3.WithPrefix())}, nil)).Commit()
		if !errors.Is(err, rpctypes.ErrDuplicateKey) {
			t.Errorf("txn writing a key and deleting its range in a nested txn: %v, want %v", err, rpctypes.ErrDuplicateKey)
		}
		var many []clientv3.Op
		for i := 0; i <= etcdshim.MaxTxnOps; i++ {
			many = append(many, clientv3.OpPut(fmt.Sprint("n/many/", i), ""))
		}
		if _, err := c.Txn(ctx).Then(many...).Commit(); !errors.Is(err, rpctypes.ErrTooManyOps) {
			t.Errorf("txn of %d ops: %v, want %v", len(many), err, rpctypes.ErrTooManyOps)
		}
		if get, err := c.Get(ctx, "n/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || get.Count != 4 || len(get.Kvs) != 0 || get.Header.Revision != ts.rev(3) {
			t.Errorf("count after refused txns: %v, %v; want 4 keys at revision 3", get, err)
		}
	})
}

func TestKV_PutIgnoreValueAndLease(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		_, err := c.Put(ctx, "iv", "v", clientv3.WithIgnoreValue())
		if !errors.Is(err, rpctypes.ErrValueProvided) || err.Error() != "etcdserver: value is provided" {
			t.Errorf("Put with ignore_value and a value: %v, want %v", err, rpctypes.ErrValueProvided)
		}
		if _, err := c.Put(ctx, "iv", "", clientv3.WithIgnoreValue()); !errors.Is(err, rpctypes.ErrKeyNotFound) {
			t.Errorf("Put with ignore_value of a missing key: %v, want %v", err, rpctypes.ErrKeyNotFound)
		}
		mustPut(t, c, "iv", "1") // 1
		lease, err := c.Grant(ctx, 600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, "iv", "2", clientv3.WithIgnoreLease(), clientv3.WithLease(lease.ID)); !errors.Is(err, rpctypes.ErrLeaseProvided) {
			t.Errorf("Put with ignore_lease and a lease: %v, want %v", err, rpctypes.ErrLeaseProvided)
		}
		resp := mustPut(t, c, "iv", "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease.ID), clientv3.WithPrevKV()) // 2
		if resp.PrevKv == nil || string(resp.PrevKv.Value) != "1" {
			t.Errorf("prev kv %v, want value 1", resp.PrevKv)
		}
		mustPut(t, c, "iv", "3", clientv3.WithIgnoreLease()) // 3
		get, err := c.Get(ctx, "iv")
		if err != nil || len(get.Kvs) != 1 {
			t.Fatalf("Get: %v, %v", get, err)
		}
		kv := get.Kvs[0]
		if string(kv.Value) != "3" || kv.Lease != int64(lease.ID) || kv.Version != 3 || kv.ModRevision != ts.rev(3) || kv.CreateRevision != ts.rev(1) {
			t.Errorf("after ignore_value and ignore_lease puts: %v; want value 3, lease %d, version 3", kv, lease.ID)
		}
	})
}

func TestLease_KeepAliveAndExpiry(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		granted := time.Now()
		const ttlSeconds = 2
		lease, err := c.Grant(ctx, ttlSeconds)
		if err != nil {
			t.Fatalf("Grant: %v", err)
		}
		put := mustPut(t, c, "ls/a", "x", clientv3.WithLease(lease.ID))
		mustPut(t, c, "ls/b", "y", clientv3.WithLease(lease.ID))
		w := c.Watch(ctx, "ls/", clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision+2))

		kctx, stopKeepAlive := context.WithCancel(ctx)
		defer stopKeepAlive()
		ka, err := c.KeepAlive(kctx, lease.ID)
		if err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
		// Keep the lease alive for well over its TTL.
		var n int
		for deadline := time.After(waitFor); time.Since(granted) < 5*ttlSeconds*time.Second/2; {
			select {
			case resp, ok := <-ka:
				if !ok {
					t.Fatalf("keepalive channel closed after %d responses", n)
				}
				if resp.ID != lease.ID || resp.TTL != ttlSeconds {
					t.Errorf("keepalive response %+v, want lease %x TTL %d", resp, lease.ID, ttlSeconds)
				}
				n++
			case <-deadline:
				t.Fatal("keepalive stalled")
			}
		}
		if n < 3 {
			t.Errorf("%d keepalive responses in %v for a %ds lease, want several", n, time.Since(granted), ttlSeconds)
		}
		ttl, err := c.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
		if err != nil || ttl.TTL <= 0 || ttl.GrantedTTL != ttlSeconds || len(ttl.Keys) != 2 {
			t.Fatalf("TimeToLive of a kept-alive lease: %+v, %v", ttl, err)
		}
		leases, err := c.Leases(ctx)
		if err != nil || len(leases.Leases) != 1 || leases.Leases[0].ID != lease.ID {
			t.Errorf("Leases: %+v, %v", leases, err)
		}

		// Stop keeping it alive: the lease expires and its keys go, at one
		// revision.
		stopKeepAlive()
		events := collect(t, w, 2)
		ts.wantEvents(t, "expiry", events, fmt.Sprintf("DELETE ls/a@%d", put.Header.Revision+2-ts.base), fmt.Sprintf("DELETE ls/b@%d", put.Header.Revision+2-ts.base))
		get, err := c.Get(ctx, "ls/", clientv3.WithPrefix())
		if err != nil || len(get.Kvs) != 0 {
			t.Errorf("keys of the expired lease: %v, %v", get, err)
		}
		ttl, err = c.TimeToLive(ctx, lease.ID)
		if err != nil || ttl.TTL != -1 {
			t.Errorf("TimeToLive of the expired lease: %+v, %v; want TTL -1", ttl, err)
		}
		if _, err := c.KeepAliveOnce(ctx, lease.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Errorf("KeepAliveOnce of the expired lease: %v, want %v", err, rpctypes.ErrLeaseNotFound)
		}
		if _, err := c.Revoke(ctx, lease.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Errorf("Revoke of the expired lease: %v, want %v", err, rpctypes.ErrLeaseNotFound)
		}

		// A chosen ID, granted twice.
		lc := pb.NewLeaseClient(c.ActiveConnection())
		if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 42, TTL: 600}); err != nil {
			t.Fatalf("grant lease 42: %v", err)
		}
		if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 42, TTL: 600}); !errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseExist) {
			t.Errorf("grant lease 42 again: %v, want %v", err, rpctypes.ErrLeaseExist)
		}
	})
}

func TestMaintenance_Status(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		mustPut(t, c, "s/a", "1")
		mustPut(t, c, "s/b", "2")
		mustDelete(t, c, "s/a")
		st, err := c.Status(ctx, ts.addr)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if st.Version != etcdshim.Version || st.Header.Revision != ts.rev(3) || st.RaftIndex != uint64(ts.rev(3)) || st.RaftAppliedIndex != uint64(ts.rev(3)) ||
			st.Leader != st.Header.MemberId || st.Leader == 0 || st.DbSize <= 0 || st.IsLearner {
			t.Errorf("Status: %+v; want version %s, revision = raft index = %d, this member the leader, a size", st, etcdshim.Version, ts.rev(3))
		}
		members, err := c.MemberList(ctx)
		if err != nil || len(members.Members) != 1 || members.Members[0].ID != st.Header.MemberId || members.Members[0].Name != "test" ||
			members.Header.ClusterId != st.Header.ClusterId {
			t.Errorf("MemberList: %+v, %v", members, err)
		}
		if _, err := c.Defragment(ctx, ts.addr); err != nil {
			t.Errorf("Defragment: %v", err)
		}
		alarms, err := c.AlarmList(ctx)
		if err != nil || len(alarms.Alarms) != 0 {
			t.Errorf("AlarmList: %+v, %v", alarms, err)
		}
		if get, err := c.Get(ctx, "s/", clientv3.WithPrefix()); err != nil || len(get.Kvs) != 1 || get.Header.Revision != ts.rev(3) {
			t.Errorf("Get after defragment: %v, %v", get, err)
		}
	})
}

func TestServer_Unimplemented(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		conn := ts.client.ActiveConnection()
		ctx := testCtx(t)
		snap, err := pb.NewMaintenanceClient(conn).Snapshot(ctx, &pb.SnapshotRequest{})
		if err == nil {
			_, err = snap.Recv()
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("Maintenance.Snapshot: %v, want code Unimplemented", err)
		}
		_, err = pb.NewAuthClient(conn).Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "x"})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("Auth.Authenticate: %v, want code Unimplemented", err)
		}
		_, err = pb.NewClusterClient(conn).MemberAdd(ctx, &pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:1"}})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("Cluster.MemberAdd: %v, want code Unimplemented", err)
		}
		// The clientv3 snapshot reader reports the same.
		rc, err := ts.client.Snapshot(ctx)
		if err == nil {
			_, err = rc.Read(make([]byte, 1))
			rc.Close()
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("clientv3 Snapshot: %v, want unimplemented", err)
		}
		mustPut(t, ts.client, "still", "serving")
	})
}

// percentile returns the p-th percentile (0 < p <= 100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func TestServer_TwoInstancesOneDatabase(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		if b.Name == sqltest.SQLite {
			t.Skip("two instances share a database only on PostgreSQL and MySQL")
		}
		dsn := b.NewDSN(t)
		a := startServer(t, dsn)
		bs := startServer(t, dsn)
		ctx := testCtx(t)
		w := bs.client.Watch(ctx, "two/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		awaitCreated(t, w)

		const n = 50
		var delays []time.Duration
		for i := 0; i < n; i++ {
			key := fmt.Sprintf("two/%02d", i)
			resp := mustPut(t, a.client, key, "v")
			written := time.Now()
			select {
			case wr := <-w:
				if err := wr.Err(); err != nil {
					t.Fatalf("watch through B: %v", err)
				}
				a.wantEvents(t, "event through B", wr.Events, fmt.Sprintf("PUT %s=v@%d", key, resp.Header.Revision-a.base))
			case <-time.After(waitFor):
				t.Fatalf("put %s through A not seen through B within %v", key, waitFor)
			}
			delays = append(delays, time.Since(written))
		}
		p50, p99 := percentile(delays, 50), percentile(delays, 99)
		t.Logf("%s: delay from a put through A to its event through B: p50 %v, p99 %v", b.Name, p50, p99)
		if b.Name == sqltest.Postgres && p99 >= 100*time.Millisecond {
			t.Errorf("postgres: p99 delay %v, want < 100ms (LISTEN/NOTIFY)", p99)
		}

		// Writes through both share one gapless revision sequence and each
		// reads the other's.
		ra := mustPut(t, a.client, "two/x", "a").Header.Revision
		rb := mustPut(t, bs.client, "two/y", "b").Header.Revision
		if rb != ra+1 {
			t.Errorf("write through B at %d after a write through A at %d, want %d", rb, ra, ra+1)
		}
		get, err := a.client.Get(ctx, "two/y")
		if err != nil || len(get.Kvs) != 1 || !bytes.Equal(get.Kvs[0].Value, []byte("b")) {
			t.Errorf("read through A of a write through B: %v, %v", get, err)
		}
		a.wantEvents(t, "events through B", collect(t, w, 2), fmt.Sprintf("PUT two/x=a@%d", ra-a.base), fmt.Sprintf("PUT two/y=b@%d", rb-a.base))
	})
}

func TestServer_StopEndsStreams(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ts := startServer(t, b.NewDSN(t))
		c := ts.client
		ctx := testCtx(t)
		lease, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatalf("Grant: %v", err)
		}
		ka, err := c.KeepAlive(ctx, lease.ID)
		if err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
		select {
		case <-ka:
		case <-time.After(waitFor):
			t.Fatal("no keepalive response")
		}
		w := c.Watch(ctx, "stop/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		awaitCreated(t, w)
		// Open watch and keepalive streams end with Stop instead of
		// holding it until its timeout.
		if took := ts.stop(t); took > stopTimeout/2 {
			t.Errorf("Stop with open watch and keepalive streams took %v; want them ended at once, not at the %v timeout", took, stopTimeout)
		}
	})
}
