package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// DefaultSharedMaxConns bounds a Shared handle's connections when
// SharedOptions.MaxConns is 0.
const DefaultSharedMaxConns = 25

// tenantChannel is the NOTIFY channel of every store on a shared handle.
// A payload is "<schema> <revision>" after a commit and "<schema> lease"
// after a lease grant, so one LISTEN serves every tenant and each
// notification wakes the one store it names.
const tenantChannel = "sqlkube_tenant"

// SharedOptions configure a Shared handle.
type SharedOptions struct {
	// MaxConns bounds the handle's connections to PostgreSQL, the LISTEN
	// connection included, whatever the number of stores on it: at least
	// 2; 0 means DefaultSharedMaxConns.
	MaxConns int
	// Logger receives the handle's logs.
	Logger zerolog.Logger
	// Tracer, if set, sees every statement the handle's pool sends (the
	// LISTEN connection's excepted).
	Tracer pgx.QueryTracer
}

// Shared is one bounded connection pool to one PostgreSQL database, shared
// by the stores of many tenants (Options.Shared). Each tenant's tables are
// in a schema of their own, owned by a role of their own; every statement a
// store runs runs in a transaction that begins with SET LOCAL ROLE and SET
// LOCAL search_path to its tenant's, so PostgreSQL itself refuses a tenant's
// statement on another's tables. One LISTEN connection wakes the stores.
// Shared is safe for concurrent use; Close it after its stores.
type Shared struct {
	pool     *pgxpool.Pool
	listenTo *pgx.ConnConfig
	describe string
	log      zerolog.Logger

	mu   sync.Mutex // guards subs
	subs map[string]map[*subscriber]struct{}
	// listening is set while LISTEN is established: stores then need no
	// polling to learn of other instances' commits.
	listening atomic.Bool
	// txns counts the transactions the stores began (Transactions).
	txns atomic.Int64

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// NewShared connects to the PostgreSQL database at dsn (creating the
// database when it does not exist and the server allows) and starts the
// handle's LISTEN connection.
func NewShared(ctx context.Context, dsn string, opts SharedOptions) (*Shared, error) {
	if d, err := Dialect(dsn); err != nil {
		return nil, err
	} else if d != "postgres" {
		return nil, fmt.Errorf("sqlstore: a shared pool needs a postgres:// datastore, not %s", redact(dsn))
	}
	if opts.MaxConns == 0 {
		opts.MaxConns = DefaultSharedMaxConns
	}
	if opts.MaxConns < 2 {
		return nil, fmt.Errorf("sqlstore: a shared pool needs at least 2 connections (one listens), not %d", opts.MaxConns)
	}
	dsn, err := writablePostgresDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: parse postgres datastore: %w", err)
	}
	if cfg.ConnConfig.Database == "" {
		return nil, fmt.Errorf("sqlstore: postgres datastore %s names no database", redact(dsn))
	}
	if err := createPostgresDatabase(ctx, dsn, cfg.ConnConfig.Database); err != nil {
		return nil, err
	}
	listenTo := cfg.ConnConfig.Copy()
	cfg.MaxConns = int32(opts.MaxConns - 1)
	cfg.MinConns = 0
	cfg.ConnConfig.Tracer = opts.Tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("sqlstore: connect to postgres %s: %w", redact(dsn), err)
	}
	h := &Shared{
		pool:     pool,
		listenTo: listenTo,
		describe: redact(dsn),
		log:      opts.Logger.With().Str("component", "sqlstore-shared").Logger(),
		subs:     map[string]map[*subscriber]struct{}{},
	}
	ctx, h.stop = context.WithCancel(context.Background())
	h.wg.Add(1)
	go h.listen(ctx)
	return h, nil
}

// Close stops the LISTEN connection and closes the pool. Stores still open
// on the handle fail from then on.
func (h *Shared) Close() error {
	h.stop()
	h.wg.Wait()
	h.pool.Close()
	return nil
}

// Stat reports the pool's connections now: total (idle included) and
// acquired, the LISTEN connection not counted.
func (h *Shared) Stat() (total, acquired int) {
	st := h.pool.Stat()
	return int(st.TotalConns()), int(st.AcquiredConns())
}

// DatabaseID names the database the handle is on, the same whatever DSN
// reached it (host name or address, TCP or socket): its name and OID,
// and the moment its server started. Two handles with the same ID are on
// one database.
func (h *Shared) DatabaseID(ctx context.Context) (string, error) {
	var id string
	err := h.pool.QueryRow(ctx, `SELECT d.datname || ' ' || d.oid || ' ' || pg_postmaster_start_time()
 FROM pg_database d WHERE d.datname = current_database()`).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("sqlstore: identify the database: %w", err)
	}
	return id, nil
}

// Transactions is how many transactions the handle's stores have run on
// its pool so far (each statement outside a transaction is one): what
// PostgreSQL counts as their commits and rollbacks.
func (h *Shared) Transactions() int64 { return h.txns.Load() }

// conns gives a tenant's store its pools: a database/sql pool that holds no
// connection of its own, whose every statement runs as the tenant.
func (h *Shared) conns(t Tenant) (*conns, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	open := func() *sql.DB {
		db := sql.OpenDB(&tenantConnector{h: h, t: t})
		db.SetMaxIdleConns(0)
		db.SetMaxOpenConns(int(h.pool.Config().MaxConns))
		return db
	}
	db := open()
	return &conns{
		d:           postgresDialect,
		write:       db,
		read:        db,
		openMigrate: func() (*sql.DB, error) { return open(), nil },
		describe:    h.describe + " schema " + t.Schema,
	}, nil
}

// subscriber is a store's end of the handle's notifications.
type subscriber struct {
	wake chan struct{} // cap 1
	mu   sync.Mutex    // guards rev, leases, all
	// rev is the highest revision notified; leases is set when a lease
	// was granted; all when notifications may have been missed (LISTEN
	// was re-established).
	rev    int64
	leases bool
	all    bool
	// arrived is told of each revision notified (Store.notifyArrived).
	arrived func(rev int64)
}

// take returns and clears what was notified since the last take.
func (s *subscriber) take() (rev int64, leases, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rev, leases, all = s.rev, s.leases, s.all
	s.rev, s.leases, s.all = 0, false, false
	return rev, leases, all
}

func (s *subscriber) notify(rev int64, leases, all bool) {
	if rev > 0 && s.arrived != nil {
		s.arrived(rev)
	}
	s.mu.Lock()
	s.rev = max(s.rev, rev)
	s.leases = s.leases || leases
	s.all = s.all || all
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (h *Shared) subscribe(schema string, arrived func(rev int64)) *subscriber {
	sub := &subscriber{wake: make(chan struct{}, 1), arrived: arrived}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[schema] == nil {
		h.subs[schema] = map[*subscriber]struct{}{}
	}
	h.subs[schema][sub] = struct{}{}
	return sub
}

func (h *Shared) unsubscribe(schema string, sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[schema], sub)
	if len(h.subs[schema]) == 0 {
		delete(h.subs, schema)
	}
}

// dispatch hands a notification's payload to the stores of its schema.
func (h *Shared) dispatch(payload string) {
	schema, what, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	var rev int64
	leases := what == "lease"
	if !leases {
		var err error
		if rev, err = strconv.ParseInt(what, 10, 64); err != nil {
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs[schema] {
		sub.notify(rev, leases, false)
	}
}

// wakeAll tells every store that notifications may have been missed.
func (h *Shared) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.subs {
		for sub := range subs {
			sub.notify(0, true, true)
		}
	}
}

// listen holds the handle's LISTEN connection, reconnecting until ctx ends.
// While it is down, stores poll (see runFollower).
func (h *Shared) listen(ctx context.Context) {
	defer h.wg.Done()
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pgx.ConnectConfig(ctx, h.listenTo)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, "LISTEN "+tenantChannel); err != nil {
				return err
			}
			h.listening.Store(true)
			defer h.listening.Store(false)
			// Commits may have happened while nobody listened.
			h.wakeAll()
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				h.dispatch(n.Payload)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		h.log.Warn().Err(err).Msg("postgres LISTEN connection lost; stores poll until it is back")
		h.wakeAll()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
