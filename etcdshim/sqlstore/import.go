package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlkube/sqlkube/migrations"
)

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
	return openImport(ctx, c, force)
}

// OpenImport begins a load into tenant t's datastore on the handle, as
// the package's OpenImport does into a DSN's, as the tenant's role.
// Provision the tenant first.
func (h *Shared) OpenImport(ctx context.Context, t Tenant, force bool) (*Import, error) {
	c, err := h.conns(t)
	if err != nil {
		return nil, err
	}
	return openImport(ctx, c, force)
}

// openImport migrates c's datastore and begins the load; it closes c on
// failure and, later, with the Import.
func openImport(ctx context.Context, c *conns, force bool) (*Import, error) {
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
	var rev, compacted int64
	if err := tx.QueryRowContext(ctx, c.d.lockRevision).Scan(&rev, &compacted); err != nil {
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
