package etcdshim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// maxWatchResponse is the size a watch response aims to stay under: events
// of several revisions are split at revision boundaries, and a single
// revision only when the watch asked for fragments.
const maxWatchResponse = MaxRequestBytes

// progressWatchID marks a progress notification for every watch on the
// stream (clientv3.InvalidWatchID).
const progressWatchID = -1

type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

// watchStream is one Watch RPC: many watches share it and its send queue.
type watchStream struct {
	s      *Server
	ctx    context.Context
	cancel context.CancelFunc
	// out is drained by the sender goroutine; everything sent on the
	// stream goes through it, so order on the wire is order of enqueueing.
	// An item is sent as a whole: the fragments of one revision travel
	// together, since clients drop responses that come between them.
	out chan []*pb.WatchResponse
	// panicked carries the error that ends the stream when one of its
	// goroutines recovered a panic (see recoverPanic).
	panicked chan error

	mu      sync.Mutex // guards watches and nextID
	watches map[int64]*streamWatch
	nextID  int64
}

type streamWatch struct {
	id             int64
	w              *sqlstore.Watch
	progressNotify bool
	fragment       bool
	prevKV         bool
	noPut, noDel   bool
	mu             sync.Mutex
	sentEvents     bool // events sent since the last progress tick
}

func (ws *watchServer) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	// A stream that opens while Stop runs ends too.
	defer context.AfterFunc(ws.s.stopping, cancel)()
	st := &watchStream{s: ws.s, ctx: ctx, cancel: cancel, out: make(chan []*pb.WatchResponse, 64),
		panicked: make(chan error, 1), watches: map[int64]*streamWatch{}}
	ws.s.mu.Lock()
	ws.s.streams[st] = struct{}{}
	ws.s.mu.Unlock()
	ws.s.watchers.Inc()
	defer func() {
		cancel()
		st.cancelAll()
		ws.s.mu.Lock()
		delete(ws.s.streams, st)
		ws.s.mu.Unlock()
		ws.s.watchers.Dec()
	}()

	sendErr := make(chan error, 1)
	go func() { sendErr <- st.sendLoop(stream) }()
	go func() {
		defer st.recoverPanic()
		st.progressLoop()
	}()

	// Requests are read by one goroutine and handled by another, so
	// reading never waits for handling. Handling may wait for the send
	// queue (a create enqueues its Created response; a cancel waits for a
	// watch that is delivering), and the send queue drains only while the
	// client reads responses. A client that reads and sends from one loop
	// (clientv3 does) is blocked in its send while the server does not read;
	// over the in-process stream, which has no transport buffers, a server
	// that handled requests where it read them would then never drain its
	// send queue again: every watch on the stream stopped, silently.
	reqs := newRequestQueue()
	go func() {
		defer st.recoverPanic()
		for {
			req, ok := reqs.pop(ctx)
			if !ok {
				return
			}
			st.handle(req)
		}
	}()
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			reqs.push(req)
		}
	}()
	select {
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case err := <-sendErr:
		return err
	case err := <-st.panicked:
		return err
	case <-ctx.Done():
		select {
		case err := <-st.panicked:
			return err
		default:
		}
		// Server shutdown: end the stream cleanly.
		return nil
	}
}

// recoverPanic, deferred in a goroutine the stream started, turns a panic
// there into the end of the stream with code Internal, as the stream
// interceptor does for the handler's own goroutine: a panic in a goroutine
// nobody recovers would end the process.
func (st *watchStream) recoverPanic() {
	if r := recover(); r != nil {
		st.endPanicked(r)
	}
}

// endPanicked logs and counts a recovered panic and ends the stream with
// errPanicked.
func (st *watchStream) endPanicked(r any) {
	err := st.s.recovered("Watch", r)
	select {
	case st.panicked <- err:
	default: // the stream is already ending with an earlier panic
	}
	st.cancel()
}

// requestQueue holds a stream's requests between the goroutine that reads
// them and the one that handles them, in order. It is unbounded: what it
// holds is bounded by what the client sends, and a clientv3 client sends
// one create at a time.
type requestQueue struct {
	mu    sync.Mutex // guards reqs
	reqs  []*pb.WatchRequest
	ready chan struct{} // holds a token while reqs is not empty
}

func newRequestQueue() *requestQueue {
	return &requestQueue{ready: make(chan struct{}, 1)}
}

func (q *requestQueue) push(req *pb.WatchRequest) {
	q.mu.Lock()
	q.reqs = append(q.reqs, req)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop returns the oldest request, waiting for one; false once ctx ends.
func (q *requestQueue) pop(ctx context.Context) (*pb.WatchRequest, bool) {
	for {
		q.mu.Lock()
		if len(q.reqs) > 0 {
			req := q.reqs[0]
			q.reqs[0] = nil
			q.reqs = q.reqs[1:]
			more := len(q.reqs) > 0
			q.mu.Unlock()
			if more {
				select {
				case q.ready <- struct{}{}:
				default:
				}
			}
			return req, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
			return nil, false
		}
	}
}

func (st *watchStream) sendLoop(stream pb.Watch_WatchServer) error {
	for {
		select {
		case <-st.ctx.Done():
			return st.ctx.Err()
		case resps := <-st.out:
			for _, resp := range resps {
				if err := stream.Send(resp); err != nil {
					st.cancel()
					return err
				}
			}
		}
	}
}

// enqueue queues responses to be sent one after the other, with nothing in
// between; false if the stream is gone.
func (st *watchStream) enqueue(resps ...*pb.WatchResponse) bool {
	select {
	case st.out <- resps:
		return true
	case <-st.ctx.Done():
		return false
	}
}

func (st *watchStream) cancelAll() {
	st.mu.Lock()
	ws := make([]*streamWatch, 0, len(st.watches))
	for id, w := range st.watches {
		ws = append(ws, w)
		delete(st.watches, id)
	}
	st.mu.Unlock()
	for _, w := range ws {
		if w.w != nil {
			w.w.Cancel()
		}
	}
}

func (st *watchStream) handle(req *pb.WatchRequest) {
	switch {
	case req.GetCreateRequest() != nil:
		st.create(req.GetCreateRequest())
	case req.GetCancelRequest() != nil:
		st.cancelWatch(req.GetCancelRequest().WatchId)
	case req.GetProgressRequest() != nil:
		go func() {
			defer st.recoverPanic()
			st.progressAll()
		}()
	}
}

func (st *watchStream) create(cr *pb.WatchCreateRequest) {
	ctx := st.ctx
	// The revisions this process knows, not a database read: a create that
	// waited on the database would start its watch late, and etcd answers
	// a create from memory.
	cur, compacted := st.s.be.KnownRevisions()
	key := cr.Key
	if len(key) == 0 {
		key = []byte{0} // as etcd: the smallest key
	}
	// etcd refuses a negative start revision, and a range that holds no
	// key, as it does a duplicate ID: with a created and cancelled response
	// for no watch.
	refuse := ""
	switch {
	case cr.StartRevision < 0:
		refuse = rpctypes.ErrCompacted.Error()
	case len(cr.RangeEnd) > 0 && !bytes.Equal(cr.RangeEnd, []byte{0}) && bytes.Compare(key, cr.RangeEnd) >= 0:
		refuse = "mvcc: watcher range is empty"
	}
	if refuse != "" {
		st.enqueue(&pb.WatchResponse{Header: st.s.header(cur), WatchId: progressWatchID, Created: true, Canceled: true, CancelReason: refuse})
		return
	}
	sw := &streamWatch{id: cr.WatchId, progressNotify: cr.ProgressNotify, fragment: cr.Fragment, prevKV: cr.PrevKv}
	for _, f := range cr.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			sw.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			sw.noDel = true
		}
	}
	st.mu.Lock()
	if sw.id == 0 {
		// Pick the lowest free ID at or above nextID, as etcd does.
		for {
			if _, used := st.watches[st.nextID]; !used {
				break
			}
			st.nextID++
		}
		sw.id = st.nextID
		st.nextID++
	} else if _, used := st.watches[sw.id]; used {
		st.mu.Unlock()
		st.enqueue(&pb.WatchResponse{Header: st.s.header(cur), WatchId: progressWatchID, Created: true, Canceled: true,
			CancelReason: "mvcc: duplicate watch ID provided on the WatchStream"})
		return
	}
	st.watches[sw.id] = sw
	st.mu.Unlock()

	start := cr.StartRevision
	if start <= 0 {
		start = cur + 1
	}
	if !st.enqueue(&pb.WatchResponse{Header: st.s.header(cur), WatchId: sw.id, Created: true}) {
		return
	}
	if start <= compacted {
		st.removeWatch(sw.id)
		st.enqueue(&pb.WatchResponse{Header: st.s.header(cur), WatchId: sw.id, Canceled: true, CompactRevision: compacted,
			CancelReason: "etcdserver: mvcc: required revision has been compacted"})
		return
	}
	w, err := st.s.be.Watch(ctx, key, cr.RangeEnd, start, func(b sqlstore.WatchBatch) (err error) {
		// deliver runs in the store's goroutine for this watch.
		defer func() {
			if r := recover(); r != nil {
				st.endPanicked(r)
				err = errPanicked
			}
		}()
		return st.deliver(sw, b)
	})
	if err != nil {
		st.removeWatch(sw.id)
		resp := &pb.WatchResponse{Header: st.s.header(cur), WatchId: sw.id, Canceled: true, CancelReason: err.Error()}
		var ce *sqlstore.CompactedError
		if errors.As(err, &ce) {
			resp.CompactRevision = ce.CompactRevision
		}
		st.enqueue(resp)
		return
	}
	st.mu.Lock()
	if cur, ok := st.watches[sw.id]; ok && cur == sw {
		sw.w = w
		st.mu.Unlock()
	} else {
		st.mu.Unlock()
		w.Cancel() // cancelled while starting
		return
	}
	go func() {
		defer st.recoverPanic()
		st.awaitEnd(sw)
	}()
}

// awaitEnd tells the client when a watch ends on its own (compaction).
func (st *watchStream) awaitEnd(sw *streamWatch) {
	<-sw.w.Done()
	err := sw.w.Err()
	if err == nil || st.ctx.Err() != nil {
		return
	}
	if !st.removeWatch(sw.id) {
		return
	}
	resp := &pb.WatchResponse{Header: st.s.header(sw.w.Sent()), WatchId: sw.id, Canceled: true, CancelReason: err.Error()}
	if errors.Is(err, sqlstore.ErrCompacted) {
		resp.CompactRevision = sw.w.CompactRevision()
		resp.CancelReason = "etcdserver: mvcc: required revision has been compacted"
	}
	st.enqueue(resp)
}

func (st *watchStream) removeWatch(id int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.watches[id]; !ok {
		return false
	}
	delete(st.watches, id)
	return true
}

func (st *watchStream) cancelWatch(id int64) {
	st.mu.Lock()
	sw, ok := st.watches[id]
	delete(st.watches, id)
	st.mu.Unlock()
	if !ok {
		return
	}
	if sw.w != nil {
		sw.w.Cancel()
	}
	cur, _ := st.s.be.KnownRevisions()
	st.enqueue(&pb.WatchResponse{Header: st.s.header(cur), WatchId: id, Canceled: true})
}

// deliver turns a batch into responses: filtered, with or without previous
// values, split at revision boundaries to stay under maxWatchResponse. The
// fragments of a revision split for a watch that asked for them are queued
// as one item.
func (st *watchStream) deliver(sw *streamWatch, b sqlstore.WatchBatch) error {
	var (
		events    []*mvccpb.Event
		size      int
		fragments []*pb.WatchResponse
	)
	flush := func(fragment bool) error {
		if len(events) == 0 {
			return nil
		}
		fragments = append(fragments, &pb.WatchResponse{Header: st.s.header(b.Revision), WatchId: sw.id, Events: events, Fragment: fragment})
		events, size = nil, 0
		if fragment {
			return nil // the rest of the revision follows
		}
		resps := fragments
		fragments = nil
		if !st.enqueue(resps...) {
			return context.Canceled
		}
		sw.mu.Lock()
		sw.sentEvents = true
		sw.mu.Unlock()
		return nil
	}
	for i := range b.Events {
		e := &b.Events[i]
		if (e.Type == sqlstore.EventPut && sw.noPut) || (e.Type == sqlstore.EventDelete && sw.noDel) {
			continue
		}
		ev := &mvccpb.Event{Kv: toKV(&e.KV)}
		if e.Type == sqlstore.EventDelete {
			ev.Type = mvccpb.Event_DELETE
		}
		if sw.prevKV && e.PrevKV != nil {
			ev.PrevKv = toKV(e.PrevKV)
		}
		n := proto.Size(ev)
		if size+n > maxWatchResponse && len(events) > 0 {
			sameRev := events[len(events)-1].Kv.ModRevision == e.KV.ModRevision
			if !sameRev {
				if err := flush(false); err != nil {
					return err
				}
			} else if sw.fragment {
				if err := flush(true); err != nil {
					return err
				}
			}
		}
		events = append(events, ev)
		size += n
	}
	return flush(false)
}

// progressAll answers a progress request: once every watch on the stream
// has delivered everything up to the current revision, one notification
// with that revision goes to all of them.
func (st *watchStream) progressAll() {
	cur, _, err := st.s.be.Revisions(st.ctx)
	if err != nil {
		return
	}
	st.mu.Lock()
	ws := make([]*streamWatch, 0, len(st.watches))
	for _, w := range st.watches {
		if w.w != nil {
			ws = append(ws, w)
		}
	}
	st.mu.Unlock()
	for _, w := range ws {
		if err := w.w.WaitSent(st.ctx, cur); err != nil && st.ctx.Err() != nil {
			return
		}
	}
	st.enqueue(&pb.WatchResponse{Header: st.s.header(cur), WatchId: progressWatchID})
}

// progressLoop sends periodic progress notifications to idle watches that
// asked for them.
func (st *watchStream) progressLoop() {
	tick := time.NewTicker(st.s.opts.ProgressNotifyInterval)
	defer tick.Stop()
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-tick.C:
		}
		st.mu.Lock()
		ws := make([]*streamWatch, 0, len(st.watches))
		for _, w := range st.watches {
			if w.w != nil && w.progressNotify {
				ws = append(ws, w)
			}
		}
		st.mu.Unlock()
		for _, w := range ws {
			w.mu.Lock()
			busy := w.sentEvents
			w.sentEvents = false
			w.mu.Unlock()
			if busy {
				continue
			}
			st.enqueue(&pb.WatchResponse{Header: st.s.header(w.w.Sent()), WatchId: w.id})
		}
	}
}
