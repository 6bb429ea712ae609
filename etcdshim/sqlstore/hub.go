package sqlstore

import (
	"sort"
	"sync"
)

// hub holds the most recent events in memory and wakes watchers when the
// head revision moves. Events arrive in revision order, whole revisions at a
// time, from the local writer or from the log follower.
type hub struct {
	mu sync.RWMutex // guards everything below
	// head is the last revision whose events are all in events (or older).
	head int64
	// events holds the events of revisions (head-window, head], in order.
	events []Event
	// first is the lowest revision events is complete for.
	first int64
	size  int
	// gen counts the fences (see diverge); fencedAt is the last one's
	// revision.
	gen      uint64
	fencedAt int64
	// wake is closed and replaced whenever head moves.
	wake   chan struct{}
	closed bool
	// tail, when signalled, asks the follower to read the log: the local
	// writer committed past a revision the hub has not seen.
	tail chan struct{}
}

func newHub(head int64, size int) *hub {
	return &hub{head: head, first: head + 1, size: size, wake: make(chan struct{}), tail: make(chan struct{}, 1)}
}

// state returns the head revision and a channel closed when it moves.
func (h *hub) state() (int64, <-chan struct{}) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.head, h.wake
}

// publishLocal takes the events of revisions (from, to] committed by this
// process. If the hub is behind from (another instance committed between),
// it asks the follower to read the gap from the log instead.
func (h *hub) publishLocal(from, to int64, events []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.head != from {
		if h.head < to {
			select {
			case h.tail <- struct{}{}:
			default:
			}
		}
		return
	}
	h.appendLocked(to, events)
}

// appendFromLog takes the events of revisions (from, to] read from the log.
// It drops what the hub already has and reports false on a gap.
func (h *hub) appendFromLog(from, to int64, events []Event) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if to <= h.head {
		return true
	}
	if from > h.head {
		return false
	}
	i := sort.Search(len(events), func(i int) bool { return events[i].KV.ModRevision > h.head })
	h.appendLocked(to, events[i:])
	return true
}

func (h *hub) appendLocked(to int64, events []Event) {
	h.events = append(h.events, events...)
	if over := len(h.events) - h.size; over > 0 {
		// Trim whole revisions from the front, and copy once the backing
		// array is twice the window, so memory stays bounded.
		cut := over
		for cut < len(h.events) && cut > 0 && h.events[cut].KV.ModRevision == h.events[cut-1].KV.ModRevision {
			cut++
		}
		if cut >= len(h.events) {
			h.first = to + 1
			h.events = nil
		} else {
			h.first = h.events[cut].KV.ModRevision
			if cap(h.events) > 2*h.size {
				h.events = append(make([]Event, 0, h.size+h.size/2), h.events[cut:]...)
			} else {
				h.events = h.events[cut:]
			}
		}
	}
	h.head = to
	if !h.closed {
		close(h.wake)
		h.wake = make(chan struct{})
	}
}

// read returns the events of revisions [from, to] in kr, if the hub still
// holds from. ok is false when from is older than the window.
func (h *hub) read(from, to int64, kr keyRange) (events []Event, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if from < h.first {
		return nil, false
	}
	i := sort.Search(len(h.events), func(i int) bool { return h.events[i].KV.ModRevision >= from })
	for ; i < len(h.events); i++ {
		ev := h.events[i]
		if ev.KV.ModRevision > to {
			break
		}
		if kr.contains(ev.KV.Key) {
			events = append(events, ev)
		}
	}
	return events, true
}

// reset drops the window and moves head to rev, when the log between the
// old head and rev was compacted away before the hub could read it. Watches
// that still need those revisions then fail with ErrCompacted, which tells
// their clients to resume; none is silently skipped past events.
func (h *hub) reset(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev <= h.head {
		return
	}
	h.events = nil
	h.first = rev + 1
	h.head = rev
	if !h.closed {
		close(h.wake)
		h.wake = make(chan struct{})
	}
}

// generation returns how many times the hub was fenced, and the last
// fence's revision. A watch ends when the generation it started in is over.
func (h *hub) generation() (gen uint64, fencedAt int64) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.gen, h.fencedAt
}

// diverge drops the window and moves head to rev, where the store fenced
// off revisions the database lost (see fence.go). Unlike reset, head may
// move back: what the hub held above rev may be what was lost. Every
// watch ends.
func (h *hub) diverge(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = nil
	h.first = rev + 1
	h.head = rev
	h.gen++
	h.fencedAt = rev
	if !h.closed {
		close(h.wake)
		h.wake = make(chan struct{})
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.wake)
	}
}

func (h *hub) isClosed() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}
