package etcdshim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// FuzzWatch opens a watch stream per input and sends it creates (bad
// start revisions, filters, ranges, watch IDs), cancels of known and
// unknown IDs, progress requests and raw requests, between puts and
// deletes; the stream ends by closing, by a cancel of its context (a
// request racing the end), or, when the input did neither, after a last
// progress request.
func FuzzWatch(f *testing.F) {
	// Action bytes: 0 create, 1 cancel, 2 progress, 3 put, 4 delete,
	// 5 raw request, 6 close, 7 abort; then each one's fields.
	f.Add([]byte{0, 4, 2, 0, 0, 0, 0, 3, 8, 'x', 1, 0, 0})             // watch the prefix k/; put k/x
	f.Add([]byte{0, 0, 0, 6, 0, 2, 0, 1, 0, 2})                        // watch a from revision 1 with previous values; cancel it; progress
	f.Add([]byte{0, 7, 0, 9, 2, 0, 0, 0, 0, 1, 5, 1, 'a', 0, 0, 0, 0}) // the empty key from revision -1; the range b..a
	// Odd filters, fragments and progress notifications for watch 1; a
	// second watch 1.
	f.Add([]byte{0, 0, 0, 0, 3, 0xf9, 0xfa, 1, 0x0f, 4, 1, 0, 0, 2, 0, 0, 0, 8, 4, 1, 0})
	f.Add([]byte{1, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 7})            // cancel unknown IDs; create; abort
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 6})                        // create, and close at once
	f.Add([]byte{5, 7, 0x0a, 0x05, 0x0a, 0x01, 'a', 0x18, 0x05}) // a raw create of a from revision 5
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fs.fuzzWatchStream(t, fs.input(data))
		fs.sane(t)
	})
}

// watchCheck follows the responses of one fuzzed watch stream and records
// the first one that breaks etcd's rules.
type watchCheck struct {
	mu      sync.Mutex
	creates []*pb.WatchCreateRequest // sent, in order
	created int                      // created responses seen
	// watches are the live watches by ID.
	watches      map[int64]*watchState
	progressSent int
	progressSeen int
	// ambiguous is set once a watch asked for ID -1 with progress
	// notifications: its notifications look like answers to progress
	// requests.
	ambiguous bool
	seen      chan struct{} // a token after each progress response
	bad       string
}

type watchState struct {
	req  *pb.WatchCreateRequest
	last int64 // revision of the last event
}

func (wc *watchCheck) failf(format string, args ...any) {
	if wc.bad == "" {
		wc.bad = fmt.Sprintf(format, args...)
	}
}

// sent records a request before it is sent.
func (wc *watchCheck) sent(req *pb.WatchRequest) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	switch {
	case req.GetCreateRequest() != nil:
		cr := proto.Clone(req.GetCreateRequest()).(*pb.WatchCreateRequest)
		wc.creates = append(wc.creates, cr)
		if cr.WatchId == -1 && cr.ProgressNotify {
			wc.ambiguous = true
		}
	case req.GetProgressRequest() != nil:
		wc.progressSent++
	}
}

// observe checks one response against the requests sent before it.
func (wc *watchCheck) observe(resp *pb.WatchResponse) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if resp.Header == nil || resp.Header.Revision < 1 {
		wc.failf("response without a header revision: %v", resp)
		return
	}
	id := resp.WatchId
	switch {
	case resp.Created:
		if wc.created >= len(wc.creates) {
			wc.failf("created response with no create left to answer: %v", resp)
			return
		}
		cr := wc.creates[wc.created]
		wc.created++
		_, dup := wc.watches[cr.WatchId]
		refuse := cr.StartRevision < 0 || emptyWatchRange(cr) || (cr.WatchId != 0 && dup)
		switch {
		case resp.Canceled && !refuse:
			wc.failf("create %v refused: %v", cr, resp)
		case !resp.Canceled && refuse:
			wc.failf("create %v accepted as watch %d; etcd refuses a negative start revision, an empty range and a duplicate ID", cr, id)
		case resp.Canceled && (id != -1 || resp.CancelReason == ""):
			wc.failf("create %v refused without etcd's watch ID -1 and a reason: %v", cr, resp)
		}
		if resp.Canceled {
			return
		}
		if cr.WatchId != 0 && id != cr.WatchId {
			wc.failf("create %v answered with watch ID %d", cr, id)
		}
		if _, dup := wc.watches[id]; dup {
			wc.failf("create %v answered with ID %d, which a live watch has", cr, id)
		}
		wc.watches[id] = &watchState{req: cr}
	case resp.Canceled:
		if _, ok := wc.watches[id]; !ok {
			wc.failf("cancel of watch %d, which is not live: %v", id, resp)
		}
		delete(wc.watches, id)
	case len(resp.Events) == 0:
		if id == -1 {
			wc.progressSeen++
			select {
			case wc.seen <- struct{}{}:
			default:
			}
		}
	default:
		w, ok := wc.watches[id]
		if !ok {
			wc.failf("events for watch %d, which is not live: %v", id, resp.Events)
			return
		}
		wc.checkEvents(w, resp)
	}
}

// emptyWatchRange reports a create whose range holds no key, as etcd
// reads it: the empty key is "\x00", a range end of "\x00" means every key
// from the key.
func emptyWatchRange(cr *pb.WatchCreateRequest) bool {
	key := cr.Key
	if len(key) == 0 {
		key = []byte{0}
	}
	return len(cr.RangeEnd) > 0 && !bytes.Equal(cr.RangeEnd, []byte{0}) && bytes.Compare(key, cr.RangeEnd) >= 0
}

// checkEvents checks events against their watch: in its range, from its
// start revision, in order, filtered and with previous values as asked.
func (wc *watchCheck) checkEvents(w *watchState, resp *pb.WatchResponse) {
	cr := w.req
	key := cr.Key
	if len(key) == 0 {
		key = []byte{0} // etcd watches "\x00" for an empty key
	}
	if resp.Fragment && !cr.Fragment {
		wc.failf("a fragment for watch %v, which did not ask for fragments", cr)
	}
	for _, ev := range resp.Events {
		if ev.Kv == nil {
			wc.failf("event without a key: %v", ev)
			return
		}
		rev := ev.Kv.ModRevision
		switch {
		case !inRange(ev.Kv.Key, key, cr.RangeEnd):
			wc.failf("event of %q for watch %v, outside its range", ev.Kv.Key, cr)
		case rev < w.last:
			wc.failf("event at %d after one at %d for watch %v", rev, w.last, cr)
		case cr.StartRevision > 0 && rev < cr.StartRevision:
			wc.failf("event at %d for watch %v, before its start", rev, cr)
		case rev > resp.Header.Revision:
			wc.failf("event at %d in a response with header revision %d", rev, resp.Header.Revision)
		case ev.PrevKv != nil && !cr.PrevKv:
			wc.failf("a previous value for watch %v, which did not ask for them", cr)
		}
		for _, f := range cr.Filters {
			if (f == pb.WatchCreateRequest_NOPUT && ev.Type == mvccpb.PUT) || (f == pb.WatchCreateRequest_NODELETE && ev.Type == mvccpb.DELETE) {
				wc.failf("%s event for watch %v, which filters them", ev.Type, cr)
			}
		}
		w.last = rev
	}
}

func (fs *fuzzServer) fuzzWatchStream(t *testing.T, in *fuzzInput) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws, err := fs.watch.Watch(ctx)
	checkErr(t, "Watch", nil, err)
	if err != nil {
		return
	}
	wc := &watchCheck{watches: map[int64]*watchState{}, seen: make(chan struct{}, 1)}
	ended := make(chan error, 1)
	go func() {
		for {
			resp, err := ws.Recv()
			if err != nil {
				ended <- err
				return
			}
			wc.observe(resp)
		}
	}()
	send := func(req *pb.WatchRequest) bool {
		wc.sent(req)
		return ws.Send(req) == nil // on failure Recv says why
	}

	closed, aborted := false, false
	for i := 0; i < maxInputOps && in.more() && !closed && !aborted; i++ {
		switch in.byte() % 8 {
		case 0:
			closed = !send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: in.watchCreate(wc)}})
		case 1:
			id := in.watchID(wc)
			closed = !send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
		case 2:
			closed = !send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		case 3:
			fs.fuzzPut(t, in, in.key())
		case 4:
			fs.fuzzDelete(t, in)
		case 5:
			req := &pb.WatchRequest{}
			in.merge(req)
			closed = !send(req)
		case 6:
			closed = true
			if err := ws.CloseSend(); err != nil {
				t.Fatalf("CloseSend: %v", err)
			}
		case 7:
			aborted = true
			cancel()
		}
	}

	timeout := time.NewTimer(callTimeout)
	defer timeout.Stop()
	var endErr error
	gotEnd := false
	if !closed && !aborted {
		// Every request gets its answer: a last progress request is
		// answered after the answers to the creates before it.
		send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
	wait:
		for {
			wc.mu.Lock()
			done := wc.progressSeen >= wc.progressSent
			wc.mu.Unlock()
			if done {
				break
			}
			select {
			case <-wc.seen:
			case endErr = <-ended:
				gotEnd = true
				break wait
			case <-timeout.C:
				wc.mu.Lock()
				seen, sent, creates := wc.progressSeen, wc.progressSent, wc.creates
				wc.mu.Unlock()
				t.Fatalf("Watch: %d of %d progress requests answered within %v (a hang); creates %v", seen, sent, callTimeout, creates)
			}
		}
		if !gotEnd {
			wc.mu.Lock()
			if !wc.ambiguous && wc.created != len(wc.creates) {
				wc.failf("%d creates, %d created responses", len(wc.creates), wc.created)
			}
			wc.mu.Unlock()
			if err := ws.CloseSend(); err != nil {
				t.Fatalf("CloseSend: %v", err)
			}
		}
	}
	if !gotEnd {
		select {
		case endErr = <-ended:
		case <-timeout.C:
			t.Fatalf("Watch: the stream did not end within %v of the client closing it", callTimeout)
		}
	}
	switch {
	case aborted:
		// The client's own cancel.
	case errors.Is(endErr, io.EOF):
	default:
		checkErr(t, "Watch", nil, endErr)
	}
	wc.mu.Lock()
	bad := wc.bad
	wc.mu.Unlock()
	if bad != "" {
		t.Fatalf("Watch: %s", bad)
	}
	// Nothing outlives the stream.
	fs.awaitGauge(t, "sqlkube_etcd_watch_streams", 0)
	fs.awaitGauge(t, "sqlkube_store_watchers", 0)
}

// watchCreate decodes a create: key and range, start revision, filters
// (and values outside the enum), options and a watch ID.
func (in *fuzzInput) watchCreate(wc *watchCheck) *pb.WatchCreateRequest {
	key := in.key()
	cr := &pb.WatchCreateRequest{Key: key, RangeEnd: in.rangeEnd(key), StartRevision: in.revision()}
	for n := in.byte() % 4; n > 0; n-- {
		cr.Filters = append(cr.Filters, pb.WatchCreateRequest_FilterType(in.enum(2)))
	}
	flags := in.byte()
	cr.ProgressNotify, cr.PrevKv, cr.Fragment = flags&1 != 0, flags&2 != 0, flags&4 != 0
	if flags&8 != 0 {
		cr.WatchId = in.watchID(wc)
	}
	in.merge(cr)
	return cr
}

// watchID is a live watch's ID, one not in use, -1, 0, a small one or
// any number.
func (in *fuzzInput) watchID(wc *watchCheck) int64 {
	switch in.byte() % 6 {
	case 0:
		wc.mu.Lock()
		defer wc.mu.Unlock()
		for id := range wc.watches {
			return id
		}
		return 0
	case 1:
		return math.MaxInt32
	case 2:
		return -1
	case 3:
		return 0
	case 4:
		return int64(in.byte() % 4)
	}
	return in.number()
}
