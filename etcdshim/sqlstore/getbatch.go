package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// getBatcher coalesces concurrent single-key reads at the current revision
// into one statement, on the databases a read is a round trip to
// (PostgreSQL and MySQL): under load, many gets then cost the server one
// statement instead of one each.
//
// A get that finds fewer than maxInflight statements running starts one
// at once, with whatever gets are waiting, so an unloaded server adds no
// latency. Otherwise it waits for the next statement, which starts after
// it arrived: the statement's snapshot holds every write committed before
// the get began, so the read stays linearizable.
type getBatcher struct {
	s *Store

	mu       sync.Mutex
	pending  []*getCall
	inflight int
}

const (
	// getBatchInflight bounds the batched statements running at once.
	getBatchInflight = 2
	// getBatchMax bounds the keys one statement reads.
	getBatchMax = 128
	// getBatchTimeout bounds one statement: it serves many callers, so no
	// single caller's context governs it.
	getBatchTimeout = 30 * time.Second
)

type getCall struct {
	key  []byte
	done chan struct{}
	// Set before done is closed.
	rev int64
	kv  *KeyValue // nil: the key is absent
	err error
}

// get reads key at the current revision; kv is nil when it is absent.
func (b *getBatcher) get(ctx context.Context, key []byte) (rev int64, kv *KeyValue, err error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	c := &getCall{key: key, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	var batch []*getCall
	if b.inflight < getBatchInflight {
		b.inflight++
		batch = b.take()
	}
	b.mu.Unlock()
	if batch != nil {
		b.run(batch)
	}
	select {
	case <-c.done:
		return c.rev, c.kv, c.err
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
}

// take removes up to getBatchMax waiting calls; b.mu is held.
func (b *getBatcher) take() []*getCall {
	n := min(len(b.pending), getBatchMax)
	batch := make([]*getCall, n)
	copy(batch, b.pending)
	b.pending = b.pending[n:]
	if len(b.pending) == 0 {
		b.pending = nil
	}
	return batch
}

// run serves batch, then hands the next waiting calls, if any, to a
// statement of their own, so that the caller that ran this one returns.
func (b *getBatcher) run(batch []*getCall) {
	b.serve(batch)
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	next := b.take()
	b.mu.Unlock()
	go b.run(next)
}

// serve reads every call's key in one statement and answers the calls.
func (b *getBatcher) serve(batch []*getCall) {
	rev, found, err := b.query(batch)
	for _, c := range batch {
		c.rev, c.err = rev, err
		if err == nil {
			c.kv = found[string(c.key)]
		}
		close(c.done)
	}
}

// query reads the distinct keys of batch and the current revision in one
// statement: the revision is the row of kv_meta that the keys' rows are
// joined to, so a batch whose keys are all absent still returns it.
func (b *getBatcher) query(batch []*getCall) (int64, map[string]*KeyValue, error) {
	s := b.s
	start := time.Now()
	defer func() { s.metrics.sqlDuration.WithLabelValues("read").Observe(time.Since(start).Seconds()) }()

	keys := make([]any, 0, len(batch))
	seen := make(map[string]struct{}, len(batch))
	for _, c := range batch {
		if _, ok := seen[string(c.key)]; ok {
			continue
		}
		seen[string(c.key)] = struct{}{}
		keys = append(keys, c.key)
	}
	list, args := inList(keys)
	query := `SELECT m.val, c.name, c.create_revision, c.mod_revision, c.version, c.lease, c.val
 FROM kv_meta m LEFT JOIN kv_current c ON c.name IN ` + list + ` WHERE m.name = 'revision'`

	ctx, cancel := context.WithTimeout(s.stopCtx, getBatchTimeout)
	defer cancel()
	rows, err := s.c.read.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return 0, nil, fmt.Errorf("sqlstore: get: %w", err)
	}
	defer rows.Close()
	var (
		rev   int64
		found = make(map[string]*KeyValue, len(seen))
	)
	for rows.Next() {
		var (
			name, val                     []byte
			create, mod, version, leaseID sql.NullInt64
		)
		if err := rows.Scan(&rev, &name, &create, &mod, &version, &leaseID, &val); err != nil {
			return 0, nil, fmt.Errorf("sqlstore: get: %w", err)
		}
		if !mod.Valid {
			continue
		}
		found[string(name)] = &KeyValue{Key: name, CreateRevision: create.Int64, ModRevision: mod.Int64,
			Version: version.Int64, Lease: leaseID.Int64, Value: val}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("sqlstore: get: %w", err)
	}
	if rev == 0 {
		return 0, nil, fmt.Errorf("sqlstore: get: the revision row is missing")
	}
	return rev, found, nil
}
