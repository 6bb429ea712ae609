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

// Import loads rows into a datastore inside one transaction that holds the
// revision counter's lock, so nothing else writes meanwhile and a failed
// load leaves the datastore as it was. Stop the servers on the target
// first: a running one would not see the new contents until it restarts.
type Import struct {
	c         *conns
	tx        *sql.Tx
	committed bool
}

// OpenImport creates and migrates the datastore at dsn if needed and
// begins the load. A datastore with any key, log row, lease or a revision
// above 1 is refused with ErrNotEmpty, unless force, which empties it.
func OpenImport(ctx context.Context, dsn string, force bool) (*Import, error) {
	c, err := openConns(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := migrateUp(c); err != nil {
		c.close()
		return nil, err
	}
	tx, err := c.write.BeginTx(ctx, c.d.writeTx)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("sqlstore: begin import: %w", err)
	}
	im := &Import{c: c, tx: tx}
	var rev int64
	if err := tx.QueryRowContext(ctx, c.d.lockRevision).Scan(&rev); err != nil {
		im.Close()
		return nil, fmt.Errorf("sqlstore: import: lock revision: %w", err)
	}
	var rows int64
	for _, table := range []string{"kv_current", "kv_log", "leases"} {
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil {
			im.Close()
			return nil, fmt.Errorf("sqlstore: import: count %s: %w", table, err)
		}
		rows += n
	}
	if rows > 0 || rev > 1 {
		if !force {
			im.Close()
			return nil, fmt.Errorf("%w: %s is at revision %d with %d rows", ErrNotEmpty, c.describe, rev, rows)
		}
		for _, table := range []string{"kv_current", "kv_log", "leases"} {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+table); err != nil {
				im.Close()
				return nil, fmt.Errorf("sqlstore: import: empty %s: %w", table, err)
			}
		}
	}
	return im, nil
}

// Describe names the datastore without secrets.
func (im *Import) Describe() string { return im.c.describe }

// maxInsertBytes bounds the values of one multi-row INSERT, well under
// MySQL's default max_allowed_packet.
const maxInsertBytes = 4 << 20

// insert writes rows with multi-row INSERTs of at most 500 rows or
// maxInsertBytes of data each. args(i) returns row i's values and size.
func (im *Import) insert(ctx context.Context, table, cols string, ncols, n int, args func(i int) ([]any, int)) error {
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", ncols), ", ") + ")"
	for i := 0; i < n; {
		var vals []any
		var sb strings.Builder
		sb.WriteString("INSERT INTO " + table + " (" + cols + ") VALUES ")
		size, rows := 0, 0
		for ; i < n && rows < 500 && (rows == 0 || size < maxInsertBytes); i++ {
			a, sz := args(i)
			if rows > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(one)
			vals = append(vals, a...)
			size += sz
			rows++
		}
		if _, err := im.tx.ExecContext(ctx, im.c.d.rebind(sb.String()), vals...); err != nil {
			return fmt.Errorf("sqlstore: import %s: %w", table, err)
		}
	}
	return nil
}

// Leases stores leases.
func (im *Import) Leases(ctx context.Context, ls []LeaseRow) error {
	return im.insert(ctx, "leases", "id, ttl, expires_at", 3, len(ls), func(i int) ([]any, int) {
		return []any{ls[i].ID, ls[i].TTL, ls[i].ExpiresAt}, 24
	})
}

// Current stores live keys as they are, revisions included.
func (im *Import) Current(ctx context.Context, kvs []KeyValue) error {
	return im.insert(ctx, "kv_current", "name, create_revision, mod_revision, version, lease, val", 6, len(kvs), func(i int) ([]any, int) {
		kv := &kvs[i]
		return []any{kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, nonNil(kv.Value)}, len(kv.Key) + len(kv.Value)
	})
}

// Log stores rows of the revision log as they are.
func (im *Import) Log(ctx context.Context, rows []LogRow) error {
	return im.insert(ctx, "kv_log", "revision, sub, name, deleted, create_revision, version, lease, prev_revision, val", 9, len(rows), func(i int) ([]any, int) {
		r := &rows[i]
		del := 0
		if r.Deleted {
			del = 1
		}
		return []any{r.Revision, r.Sub, r.Key, del, r.CreateRevision, r.Version, r.Lease, r.PrevRevision, nonNil(r.Value)}, len(r.Key) + len(r.Value)
	})
}

// Commit sets the revision counters and commits the load: the next write
// to the datastore gets revision rev+1.
func (im *Import) Commit(ctx context.Context, rev, compactRev int64) error {
	for _, m := range []struct {
		name string
		val  int64
	}{{"revision", rev}, {"compact_revision", compactRev}} {
		if _, err := im.tx.ExecContext(ctx, im.c.d.rebind(`UPDATE kv_meta SET val = ? WHERE name = ?`), m.val, m.name); err != nil {
			return fmt.Errorf("sqlstore: import: set %s: %w", m.name, err)
		}
	}
	if err := im.tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: import: commit: %w", err)
	}
	im.committed = true
	if im.c.d.name == migrations.SQLite {
		_, _ = im.c.write.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	}
	return nil
}

// Close rolls back a load that was not committed and closes the
// connections.
func (im *Import) Close() error {
	if !im.committed {
		_ = im.tx.Rollback()
	}
	return im.c.close()
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
