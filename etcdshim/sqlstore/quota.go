package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqlkube/sqlkube/migrations"
)

// DefaultQuotaBytes is the space quota of a store whose
// Options.QuotaBytes is 0: etcd's default --quota-backend-bytes, 2 GiB.
const DefaultQuotaBytes = 2 << 30

// ErrNoSpace refuses a request that could grow the store while the store
// is over its quota or a NOSPACE alarm is active. Reads, deletes,
// compaction, lease revocation and Defragment still work.
var ErrNoSpace = errors.New("sqlstore: database space exceeded")

// QuotaError is ErrNoSpace for a request that would have taken the store
// past its quota (rather than one refused because a NOSPACE alarm was
// already active): the caller raises the alarm, as etcd does.
type QuotaError struct {
	// Size is the store's size as last measured plus what was written
	// since; Quota is Options.QuotaBytes.
	Size, Quota int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%v (%d bytes, quota %d)", ErrNoSpace, e.Size, e.Quota)
}

// Is makes errors.Is(err, ErrNoSpace) hold.
func (e *QuotaError) Is(target error) bool { return target == ErrNoSpace }

// How the store knows its size without asking the database on every
// write, and without asking an idle store anything:
//
//   - It measures (Store.Size) when it opens, after compaction and
//     Defragment, when Status asks, and in the background after a write
//     once the last measurement is older than quotaMeasureEvery, or older
//     than quotaMeasureGap when what was written since is a quarter of
//     the room the quota had left (so the estimate below is corrected
//     more often the nearer the quota is: SQLite's WAL, for one, grows
//     several times faster than the data in it). Nothing is measured
//     while nothing is written.
//   - Between measurements it adds what each write costs to the last
//     measured size: a put counts its key and value twice (the current
//     row and the log row) and 256 bytes for the rest of both rows and
//     their index entries; a lease 64 bytes. A write is refused only when
//     that estimate plus its own cost reaches the quota; it is measured
//     again first, unless the last measurement is under quotaMeasureGap
//     old, so near the quota writes cost at most one measurement a gap
//     and a refusal rests on a figure at most that old (on SQLite, see
//     measureGap, on one taken for it).
//
// Measuring is one cheap statement (PostgreSQL and MySQL read file sizes
// from their catalogs) or none (SQLite stats its files).
const (
	quotaMeasureEvery = 10 * time.Second
	quotaMeasureGap   = time.Second
	// alarmRecheck is how often a write refused by a NOSPACE alarm reads
	// the alarms again, so that one cleared through another instance on
	// the database stops refusing writes here. The background
	// measurement reads them too: an alarm raised elsewhere is seen
	// within quotaMeasureEvery of this instance's next write.
	alarmRecheck = time.Second

	kvOverhead    = 256
	leaseOverhead = 64
)

// quota is the store's space accounting and its view of the alarms.
type quota struct {
	// measureMu serializes measurements. Lock order: measureMu, then mu.
	measureMu sync.Mutex

	mu sync.Mutex
	// limit is the quota in bytes; negative: none.
	limit int64
	// size is the last measured size; at, when it was measured.
	size int64
	at   time.Time
	// written estimates the bytes written since size was measured.
	written int64
	// background is set while a background measurement runs.
	background bool
	// alarms are the active alarms as this process last read or set
	// them (read at alarmsAt); alarmGen counts the changes it made.
	alarms   []Alarm
	alarmsAt time.Time
	alarmGen int64
}

// QuotaBytes returns the store's space quota in bytes (Options.QuotaBytes
// with 0 made DefaultQuotaBytes, or what SetQuotaBytes set); negative
// means none.
func (s *Store) QuotaBytes() int64 {
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	return s.quota.limit
}

// SetQuotaBytes changes the quota of the open store, as Options.QuotaBytes
// sets it at Open (0: DefaultQuotaBytes; negative: none). The next write
// is checked against the new quota. It raises and clears no alarm: while a
// NOSPACE alarm is active writes stay refused whatever the quota, as etcd
// restarted with a larger --quota-backend-bytes refuses them until
// `etcdctl alarm disarm` (DeactivateAlarm).
func (s *Store) SetQuotaBytes(n int64) {
	if n == 0 {
		n = DefaultQuotaBytes
	}
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	s.quota.limit = n
}

func putCost(p *PutRequest) int64 { return kvOverhead + 2*int64(len(p.Key)+len(p.Value)) }

// txnCost is what a txn may write: the costlier of its branches, nested
// txns counted alike. (etcd counts only a branch's own puts, so it lets
// a put nested in a txn through while NOSPACE is active; sqlkube does not.)
func txnCost(t *TxnRequest) int64 { return max(opsCost(t.Success), opsCost(t.Failure)) }

func opsCost(ops []Op) int64 {
	var n int64
	for _, op := range ops {
		switch {
		case op.Put != nil:
			n += putCost(op.Put)
		case op.Txn != nil:
			n += txnCost(op.Txn)
		}
	}
	return n
}

// checkQuota refuses a request of the given cost with ErrDiskFull while
// the disk under the store is full, with ErrNoSpace while a NOSPACE alarm
// is active, and with a QuotaError when it would take the store past its
// quota. A request that costs nothing always passes.
func (s *Store) checkQuota(ctx context.Context, cost int64) error {
	if cost <= 0 {
		return nil
	}
	if s.disk.full.Load() {
		return ErrDiskFull
	}
	q := &s.quota
	q.mu.Lock()
	if hasNoSpace(q.alarms) {
		recheck := time.Since(q.alarmsAt) >= alarmRecheck
		if recheck {
			q.alarmsAt = time.Now() // concurrent writes need not read them too
		}
		q.mu.Unlock()
		if !recheck {
			return ErrNoSpace
		}
		alarms, err := s.Alarms(ctx)
		if err != nil {
			return err
		}
		if hasNoSpace(alarms) {
			return ErrNoSpace
		}
		q.mu.Lock()
	}
	if q.limit < 0 || q.size+q.written+cost < q.limit {
		q.mu.Unlock()
		return nil
	}
	gap := s.measureGap()
	fresh := time.Since(q.at) < gap
	q.mu.Unlock()
	if !fresh {
		if err := s.measureUnlessFresh(ctx, gap); err != nil {
			return err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if size := q.size + q.written; size+cost >= q.limit {
		return &QuotaError{Size: size, Quota: q.limit}
	}
	return nil
}

// wrote counts a write of the given cost against the quota, and measures
// the store in the background when the last measurement is old.
func (s *Store) wrote(cost int64) {
	q := &s.quota
	q.mu.Lock()
	q.written += cost
	age, gap := time.Since(q.at), s.measureGap()
	near := age >= gap && q.written >= (q.limit-q.size)/4
	start := q.limit >= 0 && !q.background && (age >= quotaMeasureEvery || near && gap > 0)
	inline := q.limit >= 0 && !start && near && gap == 0
	if start {
		q.background = true
	}
	q.mu.Unlock()
	if inline {
		if _, err := s.measure(context.Background()); err != nil {
			s.log.Warn().Err(err).Msg("measuring the database for its quota failed")
		}
		return
	}
	if !start {
		return
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.stopCtx, 10*time.Second)
		defer cancel()
		if err := s.measureUnlessFresh(ctx, gap); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("measuring the database for its quota failed")
		}
		if _, err := s.Alarms(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("reading alarms failed")
		}
		q.mu.Lock()
		q.background = false
		q.mu.Unlock()
	}()
}

// measureGap is quotaMeasureGap, or 0 on SQLite, where measuring is three
// stat calls: there the quota measures whenever its estimate asks, in
// line, and refuses a write only on a measurement taken for it.
func (s *Store) measureGap() time.Duration {
	if s.d.name == migrations.SQLite {
		return 0
	}
	return quotaMeasureGap
}

// measure reads the store's size now and makes it the quota's figure and
// the size metric's.
func (s *Store) measure(ctx context.Context) (int64, error) {
	return s.measureOlderThan(ctx, 0)
}

// measureUnlessFresh measures unless a measurement under fresh old
// exists, as when concurrent writes wait for one measurement.
func (s *Store) measureUnlessFresh(ctx context.Context, fresh time.Duration) error {
	_, err := s.measureOlderThan(ctx, fresh)
	return err
}

func (s *Store) measureOlderThan(ctx context.Context, fresh time.Duration) (int64, error) {
	q := &s.quota
	q.measureMu.Lock()
	defer q.measureMu.Unlock()
	q.mu.Lock()
	if fresh > 0 && time.Since(q.at) < fresh {
		n := q.size
		q.mu.Unlock()
		return n, nil
	}
	// Writes counted from here on may be in the measurement or not;
	// counting them twice errs toward the quota.
	before := q.written
	q.mu.Unlock()
	n, err := s.size(ctx)
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	q.size, q.at = n, time.Now()
	q.written = max(0, q.written-before)
	q.mu.Unlock()
	s.metrics.dbSize.Set(float64(n))
	return n, nil
}
