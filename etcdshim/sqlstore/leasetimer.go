package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// leaseClock tells the lease timer of a store on a shared pool when to look
// for expired leases: at the earliest expiry it knows of. It learns expiries
// from this store's grants (no query) and reads the earliest from the
// database at start, after each expiry run, and when another instance
// announces a grant (or its notifications may have been missed). Keepalives
// only move expiries later, so a known expiry is never later than the real
// one: the timer may fire early, finds nothing and reads again, but never
// late. An instance that dies leaves its leases to the others' timers.
type leaseClock struct {
	mu   sync.Mutex // guards next, seen
	next int64      // earliest known expiry (ms), 0: none
	// seen is the earliest expiry saw recorded since the timer's last
	// read of the database began: that read may have missed it.
	seen int64
	// kick wakes the timer (cap 1); wantRead asks it to read the
	// database.
	kick     chan struct{}
	wantRead atomic.Bool
}

func newLeaseClock() leaseClock { return leaseClock{kick: make(chan struct{}, 1)} }

func (c *leaseClock) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// saw records an expiry at ms this instance wrote.
func (c *leaseClock) saw(ms int64) {
	c.mu.Lock()
	earlier := c.next == 0 || ms < c.next
	if earlier {
		c.next = ms
	}
	c.seen = earliest(c.seen, ms)
	c.mu.Unlock()
	if earlier {
		c.wake()
	}
}

// reload asks for the earliest expiry to be read from the database.
func (c *leaseClock) reload() {
	c.wantRead.Store(true)
	c.wake()
}

// beginRead marks the start of a read of the earliest expiry.
func (c *leaseClock) beginRead() {
	c.mu.Lock()
	c.seen = 0
	c.mu.Unlock()
}

// set records the earliest expiry a read found, or an expiry to retry at:
// an earlier one this instance wrote since the read began still counts.
func (c *leaseClock) set(ms int64) {
	c.mu.Lock()
	c.next = earliest(ms, c.seen)
	c.mu.Unlock()
}

// retryAt arms the timer for ms, after a failed expiry run.
func (c *leaseClock) retryAt(ms int64) {
	c.mu.Lock()
	c.next, c.seen = ms, 0
	c.mu.Unlock()
}

// earliest is the earlier of two expiries, 0 meaning none.
func earliest(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

func (c *leaseClock) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

// earliestExpiry reads the earliest lease expiry in the database, 0 for
// none.
func (s *Store) earliestExpiry(ctx context.Context) (int64, error) {
	var ms sql.NullInt64
	if err := s.c.read.QueryRowContext(ctx, `SELECT MIN(expires_at) FROM leases`).Scan(&ms); err != nil {
		return 0, err
	}
	return ms.Int64, nil
}

// runLeaseTimer revokes expired leases when the earliest known expiry
// passes, instead of looking every LeaseCheckInterval. After a failure it
// retries every LeaseCheckInterval.
func (s *Store) runLeaseTimer() {
	defer s.wg.Done()
	ctx := s.stopCtx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	read := true
	for ctx.Err() == nil {
		if read {
			s.leases.beginRead()
			ms, err := s.earliestExpiry(ctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
					s.log.Warn().Err(err).Msg("reading lease expiries failed; retrying")
				}
				ms = now() + s.opts.LeaseCheckInterval.Milliseconds()
			}
			s.leases.set(ms)
		}
		read = false
		timer.Stop()
		var fire <-chan time.Time
		if next := s.leases.get(); next != 0 {
			timer.Reset(time.Duration(max(next-now(), 0)) * time.Millisecond)
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-s.leases.kick:
			read = s.leases.wantRead.Swap(false)
		case <-fire:
			// Keepalives move expiries later without telling the clock,
			// so most firings find the earliest lease renewed: reading
			// the earliest expiry first costs them one query, not two.
			s.leases.beginRead()
			ms, err := s.earliestExpiry(ctx)
			if err == nil && (ms == 0 || ms > now()) {
				s.leases.set(ms)
				read = false
				break
			}
			read = true
			if err == nil {
				err = s.expireLeases(ctx)
			}
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
					s.log.Warn().Err(err).Msg("lease expiry failed; retrying")
				}
				s.leases.retryAt(now() + s.opts.LeaseCheckInterval.Milliseconds())
				read = false
			}
		}
	}
}
