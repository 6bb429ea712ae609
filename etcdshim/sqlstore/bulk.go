package sqlstore

import (
	"fmt"
	"strings"
)

// On PostgreSQL and MySQL every statement is a round trip, and the single
// writer sends them one after another, so a batch's time grows with the
// statements its requests send. Two things make it grow with the batch
// instead of the requests:
//
//   - Read-ahead (dialect.readAhead): the rows of every key the batch's
//     requests name (writeReq.keys) are read in one statement after the
//     revision lock is taken, and the applier keeps the live rows it
//     knows for the whole batch. Every write in the batch goes through
//     the applier, which records what it wrote, and the lock keeps other
//     instances out, so what it knows stays true until commit.
//   - Deferred writes (dialect.upsertRows): a put's row in kv_current and
//     every kv_log row are kept in memory and written by a few multi-row
//     statements, before the batch commits or before any statement that
//     may read those tables (flush).

// readAheadMax bounds the keys one read-ahead statement names.
const readAheadMax = 256

// readAhead reads the live rows of the keys the batch's requests name and
// records them, absent ones too.
func (a *applier) readAhead(batch []*writeReq) error {
	seen := map[string]struct{}{}
	var keys []any
	for _, r := range batch {
		for _, k := range r.keys {
			if _, ok := seen[string(k)]; ok || len(k) == 0 || len(k) > MaxKeySize {
				continue
			}
			seen[string(k)] = struct{}{}
			keys = append(keys, k)
		}
	}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), readAheadMax)]
		keys = keys[len(chunk):]
		if err := a.readRows(chunk); err != nil {
			return err
		}
	}
	return nil
}

// readRows reads and records the rows of keys.
func (a *applier) readRows(keys []any) error {
	for _, k := range keys {
		a.remember(k.([]byte), nil)
	}
	list, args := inList(keys)
	rows, err := a.qx.QueryContext(a.ctx, a.s.q(`SELECT name, create_revision, mod_revision, version, lease, val FROM kv_current WHERE name IN `+list), args...)
	if err != nil {
		return fmt.Errorf("sqlstore: read keys ahead: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kv KeyValue
		if err := rows.Scan(&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value); err != nil {
			return fmt.Errorf("sqlstore: read keys ahead: %w", err)
		}
		a.known[string(kv.Key)] = &kv
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: read keys ahead: %w", err)
	}
	return nil
}

// deferred holds the writes of a batch not yet sent.
type deferred struct {
	current []KeyValue     // kv_current rows, the last write of each key
	index   map[string]int // key → its row in current
	log     []logRow
}

type logRow struct {
	rev, sub, create, version, lease, prev int64
	deleted                                int
	name, val                              []byte
}

func (d *deferred) empty() bool { return len(d.current) == 0 && len(d.log) == 0 }

// putCurrent records kv as the key's row in kv_current.
func (d *deferred) putCurrent(kv KeyValue) {
	if i, ok := d.index[string(kv.Key)]; ok {
		d.current[i] = kv
		return
	}
	if d.index == nil {
		d.index = map[string]int{}
	}
	d.index[string(kv.Key)] = len(d.current)
	d.current = append(d.current, kv)
}

// flushMaxRows and flushMaxBytes bound one multi-row statement, well below
// MySQL's default max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8).
const (
	flushMaxRows  = 256
	flushMaxBytes = 4 << 20
)

// flush writes the deferred rows. It is called before the batch commits
// and before any statement that reads kv_current or kv_log by anything but
// a key the applier knows.
func (a *applier) flush() error {
	d := a.deferred
	if d == nil || d.empty() {
		return nil
	}
	cur, log := d.current, d.log
	d.current, d.log = nil, nil
	clear(d.index)
	for len(cur) > 0 {
		n := fits(len(cur), func(i int) int { return len(cur[i].Key) + len(cur[i].Value) })
		args := make([]any, 0, 6*n)
		for _, kv := range cur[:n] {
			args = append(args, kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, nonNil(kv.Value))
		}
		if _, err := a.qx.ExecContext(a.ctx, a.s.q(`INSERT INTO kv_current (name, create_revision, mod_revision, version, lease, val) VALUES `+
			rowsOf(6, n)+a.s.d.upsertRows), args...); err != nil {
			return fmt.Errorf("sqlstore: write keys: %w", err)
		}
		cur = cur[n:]
	}
	for len(log) > 0 {
		n := fits(len(log), func(i int) int { return len(log[i].name) + len(log[i].val) })
		args := make([]any, 0, 9*n)
		for _, r := range log[:n] {
			args = append(args, r.rev, r.sub, r.name, r.deleted, r.create, r.version, r.lease, r.prev, nonNil(r.val))
		}
		if _, err := a.qx.ExecContext(a.ctx, a.s.q(`INSERT INTO kv_log (revision, sub, name, deleted, create_revision, version, lease, prev_revision, val) VALUES `+
			rowsOf(9, n)), args...); err != nil {
			return fmt.Errorf("sqlstore: append log: %w", err)
		}
		log = log[n:]
	}
	return nil
}

// fits returns how many of rows rows, the i-th of size(i) bytes, one
// statement takes: at least one, at most flushMaxRows, and no more than
// flushMaxBytes unless the first alone is larger.
func fits(rows int, size func(i int) int) int {
	n, total := 1, size(0)
	for n < rows && n < flushMaxRows && total+size(n) <= flushMaxBytes {
		total += size(n)
		n++
	}
	return n
}

// inList renders keys (at least one) as an IN list and its arguments,
// padded to a power of two by repeating the first key, so that a few
// statement texts serve every number of keys and prepared statements stay
// few.
func inList(keys []any) (string, []any) {
	n := 1
	for n < len(keys) {
		n *= 2
	}
	args := append(make([]any, 0, n), keys...)
	for len(args) < n {
		args = append(args, keys[0])
	}
	return rowsOf(n, 1), args
}

// rowsOf renders n rows of cols placeholders: (?, ?), (?, ?).
func rowsOf(cols, n int) string {
	row := "(?" + strings.Repeat(", ?", cols-1) + ")"
	return row + strings.Repeat(", "+row, n-1)
}

// scanKVsFlushed is scanKVs on the applier's transaction after the
// deferred writes are sent.
func (a *applier) scanKVsFlushed(query string, args []any) ([]KeyValue, error) {
	if err := a.flush(); err != nil {
		return nil, err
	}
	return scanKVs(a.ctx, a.qx, query, args)
}
