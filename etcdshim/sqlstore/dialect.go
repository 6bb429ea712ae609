package sqlstore

import (
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/sqlkube/sqlkube/migrations"
)

// dialect is what differs between databases: a few SQL strings and settings.
// Everything else is portable SQL written with '?' placeholders and rebound.
type dialect struct {
	name migrations.Dialect
	// lockRevision reads the revision counter and the compacted revision
	// and locks both until commit, so writers on every instance take
	// revisions one after another: one statement, one round trip.
	lockRevision string
	// compact removes history superseded at or below a revision (args: rev, rev).
	compact string
	// defrag gives space back to the file system where the database can
	// (SQLite's is defragmentSQLite).
	defrag []string
	// notify, if set, announces a commit to other instances (arg: revision).
	notify string
	// readTx and writeTx are the transaction options of reads and writes.
	readTx, writeTx *sql.TxOptions
	// pollInterval is how often other instances' commits are looked for
	// without a notification.
	pollInterval time.Duration
	// rebind turns '?' placeholders into the dialect's.
	rebind func(string) string
	// upsertPut, if set, is a plain put in one statement (args: key,
	// revision, lease, value, sub): it writes kv_current and kv_log and
	// returns the key's previous row, if any. Without it a put reads, then
	// writes each table: three round trips to a server where one does.
	upsertPut string
	// ownsBytes is set where the driver hands every row a byte slice of
	// its own (go-sqlite3 copies each BLOB out of SQLite), so a value
	// scanned as sql.RawBytes may be kept without a second copy.
	ownsBytes bool
	// batchGets coalesces concurrent single-key reads into one statement
	// (see getBatcher): worth it where a statement is a round trip.
	batchGets bool
	// readAhead reads the rows of every key a write batch names in one
	// statement (see applier.readAhead).
	readAhead bool
	// upsertRows, if set, makes the writer defer its row writes and send
	// them as multi-row statements (see applier.flush): it ends an INSERT
	// into kv_current so that a row replaces the key's.
	upsertRows string
	// keepAlive, if set, renews a live lease and returns its TTL in one
	// statement (args: now, id, now); without it a keepalive reads the
	// TTL, then writes.
	keepAlive string
}

// returningKeepAlive is keepAlive where UPDATE takes RETURNING.
const returningKeepAlive = `UPDATE leases SET expires_at = ? + ttl * 1000 WHERE id = ? AND expires_at > ? RETURNING ttl`

func identity(s string) string { return s }

// dollarRebind numbers placeholders for PostgreSQL. Queries never hold a '?'
// inside a literal.
func dollarRebind(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// lockRevisions reads the revision and the compacted revision; FOR UPDATE
// locks both rows.
const lockRevisions = `SELECT r.val, c.val FROM kv_meta r, kv_meta c WHERE r.name = 'revision' AND c.name = 'compact_revision'`

const portableCompact = `DELETE FROM kv_log WHERE revision <= ? AND (deleted = 1 OR revision <
 (SELECT MAX(l2.revision) FROM kv_log l2 WHERE l2.name = kv_log.name AND l2.revision <= ?))`

var sqliteDialect = dialect{
	name:         migrations.SQLite,
	lockRevision: lockRevisions,
	compact:      portableCompact,
	readTx:       &sql.TxOptions{ReadOnly: true},
	writeTx:      &sql.TxOptions{},
	pollInterval: time.Second,
	rebind:       identity,
	ownsBytes:    true,
	keepAlive:    returningKeepAlive,
}

var postgresDialect = dialect{
	name:         migrations.Postgres,
	lockRevision: lockRevisions + ` FOR UPDATE`,
	compact:      portableCompact,
	defrag:       []string{`VACUUM FULL kv_log`, `VACUUM FULL kv_current`, `VACUUM FULL leases`},
	notify:       `SELECT pg_notify('sqlkube_revision', ?)`,
	readTx:       &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
	writeTx:      &sql.TxOptions{Isolation: sql.LevelReadCommitted},
	pollInterval: time.Second,
	rebind:       dollarRebind,
	batchGets:    true,
	readAhead:    true,
	keepAlive:    returningKeepAlive,
	// The statements of a WITH see one snapshot, so prev is the row before
	// the put; the log row takes the written row's create revision and
	// version from the INSERT's RETURNING.
	upsertPut: `WITH prev AS (
 SELECT create_revision, mod_revision, version, lease, val FROM kv_current WHERE name = $1
), cur AS (
 INSERT INTO kv_current AS c (name, create_revision, mod_revision, version, lease, val) VALUES ($1, $2, $2, 1, $3, $4)
 ON CONFLICT (name) DO UPDATE SET mod_revision = EXCLUDED.mod_revision, version = c.version + 1, lease = EXCLUDED.lease, val = EXCLUDED.val
 RETURNING create_revision, version
), logged AS (
 INSERT INTO kv_log (revision, sub, name, deleted, create_revision, version, lease, prev_revision, val)
 SELECT $2, $5, $1, 0, cur.create_revision, cur.version, $3, COALESCE((SELECT mod_revision FROM prev), 0), $4 FROM cur
)
SELECT create_revision, mod_revision, version, lease, val FROM prev`,
}

var mysqlDialect = dialect{
	name:         migrations.MySQL,
	lockRevision: lockRevisions + ` FOR UPDATE`,
	// MySQL cannot name the target table in a subquery of DELETE; a derived
	// table is materialized first, so it may.
	compact: `DELETE l FROM kv_log l JOIN (SELECT name, MAX(revision) AS top FROM kv_log
 WHERE revision <= ? GROUP BY name) m ON l.name = m.name WHERE l.revision <= ? AND (l.revision < m.top OR l.deleted = 1)`,
	defrag:       []string{`OPTIMIZE TABLE kv_log`, `OPTIMIZE TABLE kv_current`, `OPTIMIZE TABLE leases`},
	readTx:       &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
	writeTx:      &sql.TxOptions{Isolation: sql.LevelReadCommitted},
	pollInterval: 100 * time.Millisecond,
	rebind:       identity,
	batchGets:    true,
	readAhead:    true,
	upsertRows: ` ON DUPLICATE KEY UPDATE create_revision = VALUES(create_revision), mod_revision = VALUES(mod_revision),
 version = VALUES(version), lease = VALUES(lease), val = VALUES(val)`,
}
