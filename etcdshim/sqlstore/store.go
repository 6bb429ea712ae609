// Package sqlstore is sqlkube's revision log: etcd's data model (keys,
// revisions, leases, watches) kept in SQL tables on SQLite, PostgreSQL or
// MySQL.
//
// Revisions are gapless and assigned in commit order: one writer per process
// takes the next revision from a counter row it locks inside the same
// transaction that writes the rows, and commits many requests at once (group
// commit). Current state lives in kv_current; every change is appended to
// kv_log, which serves historical reads and watches.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Options configure a Store.
type Options struct {
	// DSN selects the database: sqlite:///path, postgres://… or mysql://….
	DSN string
	// Logger receives the store's logs.
	Logger zerolog.Logger
	// CompactionInterval is how often history is compacted automatically;
	// 0 turns automatic compaction off.
	CompactionInterval time.Duration
	// CompactionRetention is how many recent revisions automatic compaction
	// keeps.
	CompactionRetention int64
	// WatchCacheSize is how many recent events are kept in memory for
	// watchers; older ones are read from the log.
	WatchCacheSize int
	// MaxBatch bounds how many write requests share one transaction.
	MaxBatch int
	// LeaseCheckInterval is how often expired leases are looked for. A
	// store on a Shared pool looks when the earliest expiry it knows
	// passes, and uses this only to retry after a failure.
	LeaseCheckInterval time.Duration
	// Registerer, if set, receives the store's Prometheus metrics.
	Registerer prometheus.Registerer
	// QuotaBytes is the store's space quota, etcd's --quota-backend-bytes:
	// a request that could grow the store (Put, a Txn with a put in any
	// branch, LeaseGrant) and would take its Size to the quota or past it
	// fails with a QuotaError (ErrNoSpace), and so does every such request
	// while a NOSPACE alarm is active (see ActivateAlarm). 0 means
	// DefaultQuotaBytes (2 GiB); negative means no quota (alarms raised by
	// hand still refuse writes).
	QuotaBytes int64
	// ReserveBytes is, on SQLite, the size of the reserve file kept
	// beside the database (its path with "-reserve") and given back to
	// the file system when the disk fills, so that deletes, compaction
	// and checkpoints can go on while writes that could grow the store
	// fail with ErrDiskFull (see DiskFull). 0 means DefaultReserveBytes
	// (64 MiB), or a 16th of the file system under the database where
	// that is less; negative means no reserve (the disk-full state still
	// refuses such writes until there is space). PostgreSQL and MySQL
	// ignore it.
	ReserveBytes int64
	// Shared, if set, opens the store on a shared PostgreSQL pool, in the
	// schema and with the role Tenant names (see Shared and Provision);
	// DSN is then ignored. Such a store runs no periodic SQL while idle.
	Shared *Shared
	// Tenant is the store's place on Shared.
	Tenant Tenant
	// OnAlarm, if set, is called after ActivateAlarm raised an alarm this
	// store did not know to be active (as the quota's NOSPACE is raised,
	// by etcdshim, at the first write that does not fit). It runs in the
	// caller's goroutine and must not block.
	OnAlarm func(Alarm)
}

func (o *Options) defaults() {
	if o.DSN == "" {
		o.DSN = DefaultDSN
	}
	if o.CompactionRetention <= 0 {
		o.CompactionRetention = 1000
	}
	if o.WatchCacheSize <= 0 {
		o.WatchCacheSize = 10000
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.LeaseCheckInterval <= 0 {
		o.LeaseCheckInterval = 500 * time.Millisecond
	}
	if o.QuotaBytes == 0 {
		o.QuotaBytes = DefaultQuotaBytes
	}
}

// Store is an etcd-shaped key-value store over SQL. It is safe for
// concurrent use.
type Store struct {
	opts    Options
	c       *conns
	d       dialect
	log     zerolog.Logger
	metrics *metrics
	// notifies times this server's commits' NOTIFY (PostgreSQL).
	notifies notifyTimes

	writeCh chan *writeReq
	hub     *hub
	// gets, where set, coalesces concurrent single-key reads.
	gets *getBatcher

	// seenRev and seenCompacted are the highest current and compacted
	// revisions this process has committed or read (see KnownRevisions).
	seenRev, seenCompacted atomic.Int64

	sqlMu   sync.RWMutex
	sqlText map[string]string

	quota quota
	// disk is a SQLite store's reserve and disk-full state.
	disk diskGuard
	// sizeMu guards spaceView, the MySQL view that lists tablespaces
	// (see mysqlSize).
	sizeMu    sync.Mutex
	spaceView string

	stop     context.CancelFunc
	stopCtx  context.Context
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
	writerWG sync.WaitGroup

	// shared is the pool the store is on, if any; sub receives its
	// notifications. leaseNotify announces a lease grant to the other
	// instances on the tenant's schema.
	shared      *Shared
	sub         *subscriber
	leaseNotify string
	// leases wakes the lease timer of a store on a shared pool (see
	// runLeaseTimer); listening is set while the store's own LISTEN
	// (unshared PostgreSQL) is established.
	leases    leaseClock
	listening atomic.Bool
	// compactedAt is the known revision at the last automatic compaction
	// check: with no write since, there is nothing to compact.
	compactedAt atomic.Int64
	// fenceWanted makes the writer's next batch fence off revisions the
	// database lost (see fence.go); fenceRunning is set while an empty
	// write runs to make a batch. verifyFrom, when not 0, is where the
	// hub stood when the LISTEN connection was lost: the follower
	// compares the log with the hub from there (verifyAfterReconnect).
	fenceWanted, fenceRunning atomic.Bool
	verifyFrom                atomic.Int64
}

// Open connects to the datastore, creating the database and applying the
// schema if needed, and starts the writer, the log follower, lease expiry and
// automatic compaction.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts.defaults()
	var c *conns
	var err error
	if opts.Shared != nil {
		c, err = opts.Shared.conns(opts.Tenant)
	} else {
		c, err = openConns(ctx, opts.DSN)
	}
	if err != nil {
		return nil, err
	}
	if _, err := migrateUp(c); err != nil {
		c.close()
		return nil, err
	}
	s := &Store{
		opts:    opts,
		c:       c,
		d:       c.d,
		log:     opts.Logger.With().Str("component", "sqlstore").Logger(),
		metrics: newMetrics(opts.Registerer),
		writeCh: make(chan *writeReq, 4*opts.MaxBatch),
		sqlText: map[string]string{},
		quota:   quota{limit: opts.QuotaBytes},
		leases:  newLeaseClock(),
	}
	s.metrics.watchQuota(s)
	if opts.Shared == nil {
		s.metrics.watchPools(c)
	}
	s.disk.init(c, opts)
	if h := opts.Shared; h != nil {
		schema := opts.Tenant.Schema // validated: [a-z0-9_] only
		s.shared = h
		s.d.notify = `SELECT pg_notify('` + tenantChannel + `', '` + schema + ` ' || ?)`
		s.leaseNotify = `SELECT pg_notify('` + tenantChannel + `', '` + schema + ` lease')`
		s.sub = h.subscribe(schema, s.notifyArrived)
	}
	rev, compacted, err := s.revisions(ctx, s.c.read)
	if err != nil {
		s.unsubscribe()
		c.close()
		return nil, fmt.Errorf("sqlstore: read revision: %w", err)
	}
	s.hub = newHub(rev, opts.WatchCacheSize)
	if s.d.batchGets {
		s.gets = &getBatcher{s: s}
	}
	s.saw(rev, compacted)
	s.metrics.setRevisions(rev, compacted)
	if _, err := s.measure(ctx); err != nil {
		// The quota check measures again when it needs the figure.
		s.log.Warn().Err(err).Msg("measuring the database failed")
	}
	alarms, err := s.Alarms(ctx)
	if err != nil {
		s.unsubscribe()
		c.close()
		return nil, err
	}
	if hasNoSpace(alarms) {
		s.log.Warn().Msg("a NOSPACE alarm is active: writes that could grow the store are refused until it is disarmed (etcdctl alarm disarm)")
	}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.openReserve()

	s.writerWG.Add(1)
	go s.runWriter()
	s.wg.Add(2)
	go s.runFollower()
	if s.shared != nil {
		go s.runLeaseTimer()
	} else {
		go s.runEvery(opts.LeaseCheckInterval, s.expireLeasesNow)
	}
	if opts.CompactionInterval > 0 {
		s.wg.Add(1)
		go s.runEvery(opts.CompactionInterval, s.autoCompact)
	}
	s.log.Info().Str("datastore", c.describe).Int64("revision", rev).Int64("compactRevision", compacted).Msg("datastore open")
	return s, nil
}

func (s *Store) unsubscribe() {
	if s.sub != nil {
		s.shared.unsubscribe(s.opts.Tenant.Schema, s.sub)
	}
}

// Describe names the datastore without secrets.
func (s *Store) Describe() string { return s.c.describe }

// DialectName is "sqlite", "postgres" or "mysql".
func (s *Store) DialectName() string { return string(s.d.name) }

// Close stops background work, waits for queued writes, and closes the
// database. Watches end.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.writeCh)
	s.closeMu.Unlock()
	s.writerWG.Wait()
	s.stop()
	s.hub.close()
	s.wg.Wait()
	s.unsubscribe()
	s.metrics.unregister()
	return s.c.close()
}

// q returns query text with the dialect's placeholders.
func (s *Store) q(query string) string {
	s.sqlMu.RLock()
	t, ok := s.sqlText[query]
	s.sqlMu.RUnlock()
	if ok {
		return t
	}
	t = s.d.rebind(query)
	s.sqlMu.Lock()
	s.sqlText[query] = t
	s.sqlMu.Unlock()
	return t
}

// queryer is what reads need: a pool or a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// revisions reads the current and the compacted revision.
func (s *Store) revisions(ctx context.Context, qx queryer) (current, compacted int64, err error) {
	rows, err := qx.QueryContext(ctx, `SELECT name, val FROM kv_meta WHERE name IN ('revision', 'compact_revision')`)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return 0, 0, err
		}
		if name == "revision" {
			current = v
		} else {
			compacted = v
		}
	}
	return current, compacted, rows.Err()
}

// CurrentRevision reads the store's current revision from the database.
func (s *Store) CurrentRevision(ctx context.Context) (int64, error) {
	var rev int64
	err := s.c.read.QueryRowContext(ctx, `SELECT val FROM kv_meta WHERE name = 'revision'`).Scan(&rev)
	return rev, err
}

// Revisions reads the current and the compacted revision.
func (s *Store) Revisions(ctx context.Context) (current, compacted int64, err error) {
	current, compacted, err = s.revisions(ctx, s.c.read)
	if err == nil {
		s.saw(current, compacted)
	}
	return current, compacted, err
}

// KnownRevisions returns, without a database round trip, the highest
// current and compacted revisions this process has committed, read, or
// followed from other instances' writes. They may trail the database by
// what other instances committed since: a member's view, as an etcd
// follower's is. Watches start from them, so creating one never waits on
// the database (a watch that a busy connection pool delayed would miss the
// head start callers expect).
func (s *Store) KnownRevisions() (current, compacted int64) {
	head, _ := s.hub.state()
	return max(head, s.seenRev.Load()), s.seenCompacted.Load()
}

// saw records revisions committed or read by this process.
func (s *Store) saw(current, compacted int64) {
	for {
		old := s.seenRev.Load()
		if current <= old || s.seenRev.CompareAndSwap(old, current) {
			break
		}
	}
	for {
		old := s.seenCompacted.Load()
		if compacted <= old || s.seenCompacted.CompareAndSwap(old, compacted) {
			break
		}
	}
}

// readTx runs fn in a read-only transaction that sees one snapshot.
func (s *Store) readTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	start := time.Now()
	tx, err := s.c.read.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return fmt.Errorf("sqlstore: begin read: %w", err)
	}
	err = fn(tx)
	if rerr := tx.Rollback(); err == nil && rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
		err = rerr
	}
	s.metrics.sqlDuration.WithLabelValues("read").Observe(time.Since(start).Seconds())
	return err
}
