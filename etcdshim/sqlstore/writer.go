package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// writeReq is one request queued for the writer. apply runs inside the
// batch's transaction; it must return a logical error (see isLogical) only
// before it has written anything.
type writeReq struct {
	ctx context.Context
	// keys are keys apply reads or writes by name: where the dialect reads
	// ahead (dialect.readAhead), the batch reads all their rows in one
	// statement.
	keys [][]byte
	// grows is set on a request that could grow the store (one the quota
	// counts): while the disk is full it is refused (see DiskFull).
	grows bool
	apply func(a *applier) (any, error)
	done  chan writeResult
}

type writeResult struct {
	val any
	rev int64 // the revision after the request
	err error
}

// isLogical reports errors that fail one request, not its batch.
func isLogical(err error) bool {
	for _, e := range []error{ErrCompacted, ErrFutureRevision, ErrLeaseNotFound, ErrLeaseExists,
		ErrKeyNotFound, ErrDuplicateKey, ErrKeyTooLong, ErrEmptyKey} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retryAloneError marks a request that failed with err after it had
// written: the batch is rolled back and the request runs again in a
// transaction of its own, where the same failure is its answer.
type retryAloneError struct{ err error }

func (e *retryAloneError) Error() string { return "sqlstore: retry request alone: " + e.err.Error() }
func (e *retryAloneError) Unwrap() error { return e.err }

// write queues fn, a request that cannot grow the store, for the writer
// and waits for its result.
func (s *Store) write(ctx context.Context, fn func(a *applier) (any, error)) (any, int64, error) {
	return s.writeKeys(ctx, nil, false, fn)
}

// writeKeys is write for a request that reads or writes keys by name, and
// may grow the store.
func (s *Store) writeKeys(ctx context.Context, keys [][]byte, grows bool, fn func(a *applier) (any, error)) (any, int64, error) {
	r := &writeReq{ctx: ctx, keys: keys, grows: grows, apply: fn, done: make(chan writeResult, 1)}
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil, 0, ErrClosed
	}
	// The queue is buffered; a full queue blocks here, which is the
	// back-pressure writers should feel.
	select {
	case s.writeCh <- r:
	case <-ctx.Done():
		s.closeMu.Unlock()
		return nil, 0, ctx.Err()
	}
	s.closeMu.Unlock()
	// Once queued, the request is applied or refused by the writer; wait
	// for the answer even if ctx ends, so a caller never mistakes an applied
	// write for a failed one.
	res := <-r.done
	return res.val, res.rev, res.err
}

// runWriter is the single writer: it drains the queue into batches and
// commits each batch in one transaction.
func (s *Store) runWriter() {
	defer s.writerWG.Done()
	batch := make([]*writeReq, 0, s.opts.MaxBatch)
	for r := range s.writeCh {
		batch = append(batch[:0], r)
	fill:
		for len(batch) < s.opts.MaxBatch {
			select {
			case r, ok := <-s.writeCh:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.commitBatch(batch)
	}
}

func (s *Store) commitBatch(batch []*writeReq) {
	results, err := s.applyBatch(batch)
	if err != nil && s.disk.sqlite && isDiskFull(err) {
		// The disk-full state refuses the requests that could grow the
		// store, and the reserve it releases is room for the others: a
		// request of those that failed only for lack of space runs again.
		released := s.enterDiskFull(err)
		if len(batch) == 1 && !batch[0].grows && released {
			results, err = s.applyBatch(batch)
		}
		if err != nil {
			err = s.noteDiskFull(err)
		}
	}
	if err != nil {
		if len(batch) > 1 {
			for _, r := range batch {
				s.commitBatch([]*writeReq{r})
			}
			return
		}
		var alone *retryAloneError
		if errors.As(err, &alone) {
			err = alone.err
		}
		batch[0].done <- writeResult{err: err}
		return
	}
	for i, r := range batch {
		r.done <- results[i]
	}
}

// batchTimeout bounds one batch's transaction.
const batchTimeout = 30 * time.Second

// applyBatch runs the batch in one transaction, commits it, and publishes
// its events. On error nothing was committed.
func (s *Store) applyBatch(batch []*writeReq) ([]writeResult, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	tx, err := s.c.write.BeginTx(ctx, s.d.writeTx)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: begin write: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op

	var rev, compacted int64
	if err := tx.QueryRowContext(ctx, s.d.lockRevision).Scan(&rev, &compacted); err != nil {
		return nil, fmt.Errorf("sqlstore: lock revision: %w", err)
	}
	first, firstCompacted := rev, compacted
	// A database that lost revisions this store has seen: move past them
	// and compact them away before anything reuses them (see fence.go).
	fence := s.fenceTarget(rev, compacted)
	if fence > 0 {
		rev, compacted = fence, fence
	}
	a := &applier{s: s, ctx: ctx, qx: tx, rev: rev, compacted: compacted, writable: true}
	if s.d.readAhead {
		a.keepKnown = true
		if err := a.readAhead(batch); err != nil {
			return nil, err
		}
	}
	if s.d.upsertRows != "" {
		// Deferred rows are read back from known, so it must last as
		// long as they do.
		a.keepKnown = true
		a.deferred = &deferred{}
	}
	results := make([]writeResult, len(batch))
	var events []Event
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			results[i] = writeResult{err: err, rev: a.rev}
			continue
		}
		if r.grows && s.disk.full.Load() {
			results[i] = writeResult{err: ErrDiskFull, rev: a.rev}
			continue
		}
		a.beginRequest()
		val, err := r.apply(a)
		if err != nil {
			if isLogical(err) && !a.wrote() {
				results[i] = writeResult{err: err, rev: a.rev}
				continue
			}
			if isLogical(err) {
				return nil, &retryAloneError{err: err}
			}
			return nil, err
		}
		if a.wrote() {
			a.rev++
			events = append(events, a.events...)
		}
		results[i] = writeResult{val: val, rev: a.rev}
	}
	if err := a.flush(); err != nil {
		return nil, err
	}
	if a.rev != first {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE kv_meta SET val = ? WHERE name = 'revision'`), a.rev); err != nil {
			return nil, fmt.Errorf("sqlstore: advance revision: %w", err)
		}
		if s.d.notify != "" {
			if _, err := tx.ExecContext(ctx, s.q(s.d.notify), strconv.FormatInt(a.rev, 10)); err != nil {
				return nil, fmt.Errorf("sqlstore: notify: %w", err)
			}
		}
	}
	if a.compacted != firstCompacted {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE kv_meta SET val = ? WHERE name = 'compact_revision'`), a.compacted); err != nil {
			return nil, fmt.Errorf("sqlstore: set compact revision: %w", err)
		}
	}
	notified := s.d.notify != "" && a.rev != first
	committing := time.Now()
	if notified {
		s.notifies.committing(a.rev, committing)
	}
	if err := tx.Commit(); err != nil {
		if notified {
			s.notifies.failed(a.rev)
		}
		return nil, fmt.Errorf("sqlstore: commit: %w", err)
	}
	s.metrics.commitDuration.Observe(time.Since(committing).Seconds())
	s.metrics.sqlDuration.WithLabelValues("write").Observe(time.Since(start).Seconds())
	s.metrics.batchSize.Observe(float64(len(batch)))
	if a.rev != first || a.compacted != firstCompacted {
		s.saw(a.rev, a.compacted)
		s.metrics.setRevisions(a.rev, a.compacted)
	}
	if fence > 0 {
		s.fenced(fence)
		first = fence
	}
	if a.rev != first {
		s.hub.publishLocal(first, a.rev, events)
	}
	return results, nil
}

// applier applies requests inside one transaction. rev is the last revision
// committed before the current request; a request that writes does so at
// rev+1.
type applier struct {
	s         *Store
	ctx       context.Context
	qx        queryer
	rev       int64
	compacted int64
	writable  bool

	sub    int
	events []Event
	// known holds the live rows of keys the current request has read or
	// written, nil for a key known to be absent: a Txn that compares a
	// key's revision and then puts it (every create and update
	// kube-apiserver sends) reads the row once. With keepKnown it holds
	// them for the whole batch (see readAhead).
	known     map[string]*KeyValue
	keepKnown bool
	// deferred, if set, holds writes not yet sent (see flush).
	deferred *deferred
}

func (a *applier) beginRequest() {
	a.sub = 0
	a.events = a.events[:0:0]
	if !a.keepKnown {
		clear(a.known)
	}
}

// remember records kv (nil: absent) as key's live row in the current
// request.
func (a *applier) remember(key []byte, kv *KeyValue) {
	if a.known == nil {
		a.known = map[string]*KeyValue{}
	}
	if kv != nil {
		c := *kv
		kv = &c
	}
	a.known[string(key)] = kv
}

func (a *applier) wrote() bool { return len(a.events) > 0 }

// readRevision is the revision reads in the current request see: its own
// writes count.
func (a *applier) readRevision() int64 {
	if a.wrote() {
		return a.rev + 1
	}
	return a.rev
}
