package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// logChunk bounds how many revisions one read of the log covers.
const logChunk = 1000

// readLog reads the events of revisions [from, to] in kr from the log, with
// their previous versions. It fails with ErrCompacted if from is at or below
// the compacted revision, checked on the same snapshot as the read.
func (s *Store) readLog(ctx context.Context, from, to int64, kr keyRange) ([]Event, error) {
	var events []Event
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		_, compacted, err := s.revisions(ctx, tx)
		if err != nil {
			return err
		}
		if from <= compacted {
			return ErrCompacted
		}
		w, args := kr.where("l.name", nil)
		args = append([]any{from, to}, args...)
		rows, err := tx.QueryContext(ctx, s.q(`SELECT l.revision, l.name, l.deleted, l.create_revision, l.version, l.lease, l.val,
 p.revision, p.create_revision, p.version, p.lease, p.val
 FROM kv_log l LEFT JOIN kv_log p ON p.name = l.name AND p.revision = l.prev_revision
 WHERE l.revision >= ? AND l.revision <= ? AND `+w+` ORDER BY l.revision, l.sub`), args...)
		if err != nil {
			return fmt.Errorf("sqlstore: read log: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				ev                              Event
				deleted                         int
				pRev, pCreate, pVersion, pLease sql.NullInt64
				pVal                            []byte
			)
			if err := rows.Scan(&ev.KV.ModRevision, &ev.KV.Key, &deleted, &ev.KV.CreateRevision, &ev.KV.Version, &ev.KV.Lease, &ev.KV.Value,
				&pRev, &pCreate, &pVersion, &pLease, &pVal); err != nil {
				return fmt.Errorf("sqlstore: read log: %w", err)
			}
			if deleted == 1 {
				ev.Type = EventDelete
				ev.KV = KeyValue{Key: ev.KV.Key, ModRevision: ev.KV.ModRevision}
			}
			if pRev.Valid {
				ev.PrevKV = &KeyValue{Key: ev.KV.Key, ModRevision: pRev.Int64, CreateRevision: pCreate.Int64,
					Version: pVersion.Int64, Lease: pLease.Int64, Value: pVal}
			}
			events = append(events, ev)
		}
		return rows.Err()
	})
	return events, err
}

// runFollower keeps the hub at the database's revision when other
// instances (or another process on the same SQLite file) write: on a
// PostgreSQL notification, on the writer's request, and by polling. On
// PostgreSQL it polls only while its LISTEN connection is down, so an idle
// store runs no SQL.
func (s *Store) runFollower() {
	defer s.wg.Done()
	ctx := s.stopCtx
	notified := make(chan struct{}, 1)
	listening := func() bool { return false }
	switch {
	case s.sub != nil:
		notified = s.sub.wake
		listening = s.shared.listening.Load
	case s.c.pgDSN != "":
		s.wg.Add(1)
		go s.listenPostgres(ctx, notified)
		listening = s.listening.Load
	}
	tick := time.NewTicker(s.d.pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if listening() {
				continue
			}
			// Notifications of lease grants may be missed too.
			s.leases.reload()
		case <-notified:
			if s.sub != nil {
				rev, leases, all := s.sub.take()
				if leases {
					s.leases.reload()
				}
				if head, _ := s.hub.state(); !all && rev <= head {
					continue // nothing this store has not seen
				}
			}
		case <-s.hub.tail:
		}
		if err := s.catchUp(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("reading the log for watchers failed; retrying")
		}
	}
}

// catchUp reads the log from the hub's head to the database's revision.
// A database behind the hub lost revisions the hub has: the writer fences
// them off (see fence.go).
func (s *Store) catchUp(ctx context.Context) error {
	if err := s.verifyAfterReconnect(ctx); err != nil {
		return err
	}
	for {
		// The head before the read: the hub holds only committed
		// revisions, so a database that has lost none is at least there.
		// (The head after it may be further on: the local writer.)
		before, _ := s.hub.state()
		cur, err := s.CurrentRevision(ctx)
		if err != nil {
			return err
		}
		if cur < before {
			s.log.Error().Int64("revision", cur).Int64("seen", before).Msg("the database's revision is below one this server has seen: commits it saw were lost " +
				"(a failover to a standby that lacked them, or a restore of an older backup); fencing them off: watches end with 410 Gone and clients relist")
			s.requestFence()
			return nil
		}
		head, _ := s.hub.state()
		if cur <= head {
			return nil
		}
		to := min(cur, head+logChunk)
		events, err := s.readLog(ctx, head+1, to, keyRange{start: []byte{}, noEnd: true})
		if errors.Is(err, ErrCompacted) {
			s.log.Warn().Int64("head", head).Int64("revision", cur).Msg("watch window fell behind compaction; watches needing older revisions will be cancelled")
			s.hub.reset(cur)
			return nil
		}
		if err != nil {
			return err
		}
		s.hub.appendFromLog(head, to, events)
		s.metrics.setCurrent(to)
	}
}

// listenPostgres turns NOTIFY sqlkube_revision into wake-ups, reconnecting
// until ctx ends.
func (s *Store) listenPostgres(ctx context.Context, notified chan<- struct{}) {
	defer s.wg.Done()
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pgx.Connect(ctx, s.c.pgDSN)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, "LISTEN sqlkube_revision"); err != nil {
				return err
			}
			s.listening.Store(true)
			defer s.listening.Store(false)
			// Once lost, the connection may come back on another server
			// (a failover): check then that it has what the hub has.
			defer func() {
				head, _ := s.hub.state()
				s.verifyFrom.CompareAndSwap(0, head)
			}()
			// A commit may have happened while we were not listening.
			select {
			case notified <- struct{}{}:
			default:
			}
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if rev, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
					s.notifyArrived(rev)
				}
				select {
				case notified <- struct{}{}:
				default:
				}
			}
		}()
		if ctx.Err() != nil {
			return
		}
		s.log.Warn().Err(err).Msg("postgres LISTEN connection lost; reconnecting")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// WatchBatch is what a watch delivers: the events of whole revisions, in
// order. Revision is the last revision the batch covers.
type WatchBatch struct {
	Events   []Event
	Revision int64
}

// Watch follows changes of keys in [Key, End) (End as in RangeRequest).
type Watch struct {
	s        *Store
	kr       keyRange
	deliver  func(WatchBatch) error
	cancel   context.CancelFunc
	done     chan struct{}
	gen      uint64     // the hub's generation the watch started in
	mu       sync.Mutex // guards sent, sentWake, err, compacted
	sent     int64
	sentWake chan struct{}
	err      error
	compact  int64
}

// Watch starts a watch of [key, end) from startRev; startRev <= 0 means
// changes after the current revision. deliver is called from the watch's own
// goroutine with each batch, in order; it may block (a slow consumer only
// delays this watch, which then catches up from the log). The watch ends when
// ctx ends, deliver fails, or history it needs was compacted (Err says so).
// A startRev at or below the compacted revision fails with ErrCompacted.
func (s *Store) Watch(ctx context.Context, key, end []byte, startRev int64, deliver func(WatchBatch) error) (*Watch, error) {
	gen, _ := s.hub.generation()
	cur, compacted := s.KnownRevisions()
	if startRev <= 0 {
		startRev = cur + 1
	}
	if startRev <= compacted {
		return nil, &CompactedError{CompactRevision: compacted}
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watch{s: s, kr: newKeyRange(key, end), deliver: deliver, cancel: cancel, done: make(chan struct{}),
		gen: gen, sent: startRev - 1, sentWake: make(chan struct{})}
	s.metrics.watchers.Inc()
	go w.run(ctx, startRev)
	return w, nil
}

// Cancel stops the watch and waits for its goroutine.
func (w *Watch) Cancel() {
	w.cancel()
	<-w.done
}

// Done is closed when the watch has ended.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err says why the watch ended: nil if cancelled, ErrCompacted if the
// history it needed is gone (CompactRevision says up to where).
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// CompactRevision is the compacted revision when Err is ErrCompacted.
func (w *Watch) CompactRevision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.compact
}

// Sent is the revision up to which every matching event was delivered.
func (w *Watch) Sent() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}

// WaitSent blocks until every matching event up to rev was delivered, the
// watch ended, or ctx ended.
func (w *Watch) WaitSent(ctx context.Context, rev int64) error {
	for {
		w.mu.Lock()
		sent, wake := w.sent, w.sentWake
		w.mu.Unlock()
		if sent >= rev {
			return nil
		}
		select {
		case <-wake:
		case <-w.done:
			return fmt.Errorf("sqlstore: watch ended")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (w *Watch) setSent(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev > w.sent {
		w.sent = rev
		close(w.sentWake)
		w.sentWake = make(chan struct{})
	}
}

func (w *Watch) run(ctx context.Context, next int64) {
	defer close(w.done)
	defer w.s.metrics.watchers.Dec()
	defer w.cancel()
	for {
		head, wake := w.s.hub.state()
		if w.s.hub.isClosed() {
			return
		}
		if gen, fencedAt := w.s.hub.generation(); gen != w.gen {
			// The database lost revisions this watch may have
			// delivered: its client must start over.
			w.mu.Lock()
			w.err, w.compact = ErrCompacted, fencedAt
			w.mu.Unlock()
			return
		}
		if next <= head {
			to := head
			events, ok := w.s.hub.read(next, to, w.kr)
			if !ok {
				to = min(head, next+logChunk-1)
				var err error
				events, err = w.s.readLog(ctx, next, to, w.kr)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					w.fail(err)
					return
				}
			}
			if len(events) > 0 {
				if err := w.deliver(WatchBatch{Events: events, Revision: to}); err != nil {
					return
				}
				w.s.metrics.eventsSent.Add(float64(len(events)))
			}
			next = to + 1
			w.setSent(to)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
	}
}

func (w *Watch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
	if errors.Is(err, ErrCompacted) {
		_, compacted, cerr := w.s.Revisions(context.Background())
		if cerr == nil {
			w.compact = compacted
		}
	}
}
