package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlkube/sqlkube/migrations"
)

// LogRow is one row of the revision log: one change of one key. A delete
// (Deleted) carries only Key, Revision and PrevRevision.
type LogRow struct {
	Revision       int64
	Sub            int64
	Key            []byte
	Deleted        bool
	CreateRevision int64
	Version        int64
	Lease          int64
	// PrevRevision is the revision of the key's previous log row, 0 if it
	// had none.
	PrevRevision int64
	Value        []byte
}

// LeaseRow is a lease as stored: its granted TTL in seconds and the moment
// it expires, in Unix milliseconds.
type LeaseRow struct {
	ID        int64
	TTL       int64
	ExpiresAt int64
}

// ErrNotEmpty is returned by OpenImport for a datastore that already holds
// data, when not forced.
var ErrNotEmpty = errors.New("sqlstore: datastore is not empty")

// ErrNoDatastore is returned by OpenExport when the DSN names no sqlkube
// datastore (no database, or no schema in it).
var ErrNoDatastore = errors.New("sqlstore: no sqlkube datastore there")

// Export is a consistent, read-only view of a datastore's tables: every
// read runs in one snapshot transaction, so the datastore may stay in use.
type Export struct {
	c  *conns
	tx *sql.Tx
	// Revision and CompactRevision are the datastore's at the snapshot.
	Revision, CompactRevision int64
	// NumKeys, NumLeases and NumLogRows count the rows of each table at the snapshot.
	NumKeys, NumLeases, NumLogRows int64
}

// OpenExport opens the datastore at dsn for reading. It never creates a
// database or changes the schema: a missing datastore is ErrNoDatastore,
// one at another schema version than this binary's is an error.
func OpenExport(ctx context.Context, dsn string) (*Export, error) {
	c, err := openSourceConns(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return openExport(ctx, c)
}

// OpenExport opens tenant t's datastore on the handle for reading, as
// the package's OpenExport does a DSN's: in one snapshot transaction run
// as the tenant's role. A tenant that was never provisioned is
// ErrNoDatastore.
func (h *Shared) OpenExport(ctx context.Context, t Tenant) (*Export, error) {
	c, err := h.conns(t)
	if err != nil {
		return nil, err
	}
	exists, err := h.Provisioned(ctx, t)
	if err != nil {
		c.close()
		return nil, err
	}
	if !exists {
		c.close()
		return nil, fmt.Errorf("%w: %s has no schema %s", ErrNoDatastore, h.describe, t.Schema)
	}
	return openExport(ctx, c)
}

// openExport begins the export's snapshot on c, which it closes on
// failure and, later, with the Export.
func openExport(ctx context.Context, c *conns) (*Export, error) {
	if err := checkSchema(c); err != nil {
		c.close()
		return nil, err
	}
	tx, err := c.read.BeginTx(ctx, c.d.readTx)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("sqlstore: begin export: %w", err)
	}
	e := &Export{c: c, tx: tx}
	s := &Store{d: c.d}
	if e.Revision, e.CompactRevision, err = s.revisions(ctx, tx); err != nil {
		e.Close()
		return nil, fmt.Errorf("sqlstore: export: read revision: %w", err)
	}
	for _, t := range []struct {
		table string
		n     *int64
	}{{"kv_current", &e.NumKeys}, {"leases", &e.NumLeases}, {"kv_log", &e.NumLogRows}} {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.table).Scan(t.n); err != nil {
			e.Close()
			return nil, fmt.Errorf("sqlstore: export: count %s: %w", t.table, err)
		}
	}
	return e, nil
}

// Describe names the datastore without secrets.
func (e *Export) Describe() string { return e.c.describe }

// DialectName is "sqlite", "postgres" or "mysql".
func (e *Export) DialectName() string { return string(e.c.d.name) }

// Close ends the snapshot and closes the connections.
func (e *Export) Close() error {
	_ = e.tx.Rollback()
	return e.c.close()
}

// Leases calls fn with every lease, in batches of at most batch.
func (e *Export) Leases(ctx context.Context, batch int, fn func([]LeaseRow) error) error {
	rows, err := e.tx.QueryContext(ctx, `SELECT id, ttl, expires_at FROM leases ORDER BY id`)
	if err != nil {
		return fmt.Errorf("sqlstore: export leases: %w", err)
	}
	defer rows.Close()
	out := make([]LeaseRow, 0, batch)
	for rows.Next() {
		var l LeaseRow
		if err := rows.Scan(&l.ID, &l.TTL, &l.ExpiresAt); err != nil {
			return fmt.Errorf("sqlstore: export leases: %w", err)
		}
		if out = append(out, l); len(out) == batch {
			if err := fn(out); err != nil {
				return err
			}
			out = out[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: export leases: %w", err)
	}
	if len(out) > 0 {
		return fn(out)
	}
	return nil
}

// Current calls fn with every live key in key order, in batches of at most
// batch keys. fn must not keep the slice.
func (e *Export) Current(ctx context.Context, batch int, fn func([]KeyValue) error) error {
	rows, err := e.tx.QueryContext(ctx, `SELECT name, create_revision, mod_revision, version, lease, val FROM kv_current ORDER BY name`)
	if err != nil {
		return fmt.Errorf("sqlstore: export keys: %w", err)
	}
	defer rows.Close()
	out := make([]KeyValue, 0, batch)
	for rows.Next() {
		var kv KeyValue
		if err := rows.Scan(&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value); err != nil {
			return fmt.Errorf("sqlstore: export keys: %w", err)
		}
		if out = append(out, kv); len(out) == batch {
			if err := fn(out); err != nil {
				return err
			}
			out = out[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: export keys: %w", err)
	}
	if len(out) > 0 {
		return fn(out)
	}
	return nil
}

// Log calls fn with every row of the revision log in (revision, sub)
// order, in batches of at most batch rows.
func (e *Export) Log(ctx context.Context, batch int, fn func([]LogRow) error) error {
	rows, err := e.tx.QueryContext(ctx, `SELECT revision, sub, name, deleted, create_revision, version, lease, prev_revision, val FROM kv_log ORDER BY revision, sub`)
	if err != nil {
		return fmt.Errorf("sqlstore: export log: %w", err)
	}
	defer rows.Close()
	out := make([]LogRow, 0, batch)
	for rows.Next() {
		var r LogRow
		var deleted int64
		if err := rows.Scan(&r.Revision, &r.Sub, &r.Key, &deleted, &r.CreateRevision, &r.Version, &r.Lease, &r.PrevRevision, &r.Value); err != nil {
			return fmt.Errorf("sqlstore: export log: %w", err)
		}
		r.Deleted = deleted != 0
		if out = append(out, r); len(out) == batch {
			if err := fn(out); err != nil {
				return err
			}
			out = out[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: export log: %w", err)
	}
	if len(out) > 0 {
		return fn(out)
	}
	return nil
}

// BackupSQLite writes a consistent copy of the SQLite datastore at dsn to
// path (which must not exist) with VACUUM INTO, while the datastore may be
// in use: the copy is the datastore at one commit.
func BackupSQLite(ctx context.Context, dsn, path string) error {
	if d, err := Dialect(dsn); err != nil {
		return err
	} else if d != migrations.SQLite {
		return fmt.Errorf("sqlstore: VACUUM INTO backs up SQLite only, not %s", redact(dsn))
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("sqlstore: backup: %s exists", path)
	}
	c, err := openSourceConns(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.close()
	if err := checkSchema(c); err != nil {
		return err
	}
	if _, err := c.read.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("sqlstore: backup: %w", err)
	}
	return nil
}

// openSourceConns opens an existing datastore for reading: it creates no
// database, and does not change a SQLite file's journal mode.
func openSourceConns(ctx context.Context, dsn string) (*conns, error) {
	d, err := Dialect(dsn)
	if err != nil {
		return nil, err
	}
	switch d {
	case migrations.SQLite:
		path, err := sqlitePath(dsn)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoDatastore, err)
		}
		db, err := sql.Open("sqlite3", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=10000&_txlock=deferred")
		if err != nil {
			return nil, fmt.Errorf("sqlstore: open sqlite: %w", err)
		}
		db.SetMaxOpenConns(4)
		return &conns{d: sqliteDialect, write: db, read: db, describe: "sqlite://" + path,
			openMigrate: func() (*sql.DB, error) {
				return sql.Open("sqlite3", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=10000")
			}}, nil
	case migrations.Postgres:
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: open postgres: %w", err)
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("%w: connect to %s: %v", ErrNoDatastore, redact(dsn), err)
		}
		return &conns{d: postgresDialect, write: db, read: db, describe: redact(dsn),
			openMigrate: func() (*sql.DB, error) { return sql.Open("pgx", dsn) }}, nil
	default:
		cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
		if err != nil {
			return nil, fmt.Errorf("sqlstore: parse mysql datastore: %w", err)
		}
		cfg.ParseTime = false
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, fmt.Errorf("sqlstore: open mysql: %w", err)
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("%w: connect to %s: %v", ErrNoDatastore, redact(dsn), err)
		}
		mcfg := cfg.Clone()
		mcfg.MultiStatements = true
		return &conns{d: mysqlDialect, write: db, read: db, describe: redact(dsn),
			openMigrate: func() (*sql.DB, error) { return sql.Open("mysql", mcfg.FormatDSN()) }}, nil
	}
}

// checkSchema requires the schema this binary writes: an export copies
// tables column for column.
func checkSchema(c *conns) error {
	db, err := c.openMigrate()
	if err != nil {
		return fmt.Errorf("sqlstore: open for migration: %w", err)
	}
	v, dirty, err := migrations.Version(db, c.d.name)
	if err != nil {
		return err
	}
	latest, err := migrations.Latest(c.d.name)
	if err != nil {
		return err
	}
	switch {
	case v == 0:
		return fmt.Errorf("%w: %s has no schema", ErrNoDatastore, c.describe)
	case dirty:
		return fmt.Errorf("sqlstore: %s is dirty at schema version %d", c.describe, v)
	case v > latest:
		return fmt.Errorf("%w: %s is at version %d, this binary knows up to %d", migrations.ErrSchemaTooNew, c.describe, v, latest)
	case v < latest:
		return fmt.Errorf("sqlstore: %s is at schema version %d; run 'sqlkube migrate up' on it first (this binary writes %d)", c.describe, v, latest)
	}
	return nil
}
