package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"
)

// keyRange is a half-open interval of keys; end nil means the single key
// start, and noEnd means every key >= start.
type keyRange struct {
	start []byte
	end   []byte
	noEnd bool
}

func newKeyRange(key, end []byte) keyRange {
	switch {
	case len(end) == 0:
		return keyRange{start: key}
	case len(end) == 1 && end[0] == 0:
		return keyRange{start: key, noEnd: true}
	}
	return keyRange{start: key, end: end}
}

func (r keyRange) single() bool { return r.end == nil && !r.noEnd }

// contains reports whether key is in the range.
func (r keyRange) contains(key []byte) bool {
	switch {
	case r.single():
		return bytes.Equal(key, r.start)
	case r.noEnd:
		return bytes.Compare(key, r.start) >= 0
	}
	return bytes.Compare(key, r.start) >= 0 && bytes.Compare(key, r.end) < 0
}

// empty reports a range that can hold no key (end <= start).
func (r keyRange) empty() bool {
	return !r.single() && !r.noEnd && bytes.Compare(r.end, r.start) <= 0
}

// where renders the range as a condition on column col. An empty start is
// bound as an empty byte string: a nil one would be SQL NULL, which matches
// nothing.
func (r keyRange) where(col string, args []any) (string, []any) {
	start := nonNil(r.start)
	switch {
	case r.single():
		return col + " = ?", append(args, start)
	case r.noEnd:
		return col + " >= ?", append(args, start)
	}
	return col + " >= ? AND " + col + " < ?", append(args, start, r.end)
}

// Range reads keys at the current or a past revision, linearizably.
func (s *Store) Range(ctx context.Context, req RangeRequest) (*RangeResult, error) {
	if req.Revision <= 0 && len(req.End) == 0 && len(req.Key) > 0 {
		return s.getCurrent(ctx, req)
	}
	if req.Revision <= 0 && req.SortTarget == SortByKey && !filtered(req) {
		if res, ok, err := s.rangeCurrent(ctx, req); ok || err != nil {
			return res, err
		}
	}
	var res *RangeResult
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		cur, compacted, err := s.revisions(ctx, tx)
		if err != nil {
			return err
		}
		res, err = s.rangeAt(ctx, tx, req, cur, compacted)
		return err
	})
	return res, err
}

// getCurrent reads one key at the current revision in a single statement,
// which sees one snapshot on every database: the most common read needs no
// transaction. Where a statement is a round trip to a server, concurrent
// gets share one (see getBatcher).
func (s *Store) getCurrent(ctx context.Context, req RangeRequest) (*RangeResult, error) {
	var (
		rev   int64
		found *KeyValue
		err   error
	)
	if s.gets != nil {
		rev, found, err = s.gets.get(ctx, req.Key)
	} else {
		rev, found, err = s.getOne(ctx, req.Key)
	}
	if err != nil {
		return nil, err
	}
	res := &RangeResult{Revision: rev}
	if found == nil {
		return res, nil
	}
	res.Count = 1
	kv := *found
	if (req.MinModRevision > 0 && kv.ModRevision < req.MinModRevision) || (req.MaxModRevision > 0 && kv.ModRevision > req.MaxModRevision) ||
		(req.MinCreateRevision > 0 && kv.CreateRevision < req.MinCreateRevision) || (req.MaxCreateRevision > 0 && kv.CreateRevision > req.MaxCreateRevision) {
		return res, nil
	}
	if req.CountOnly {
		return res, nil
	}
	if req.KeysOnly || len(kv.Value) == 0 {
		kv.Value = nil
	}
	res.KVs = []KeyValue{kv}
	return res, nil
}

// getOne reads one key and the current revision in one statement; kv is
// nil when the key is absent.
func (s *Store) getOne(ctx context.Context, key []byte) (int64, *KeyValue, error) {
	start := time.Now()
	defer func() { s.metrics.sqlDuration.WithLabelValues("read").Observe(time.Since(start).Seconds()) }()
	var (
		rev                           int64
		name, val                     []byte
		create, mod, version, leaseID sql.NullInt64
	)
	err := s.c.read.QueryRowContext(ctx, s.q(`SELECT m.val, c.name, c.create_revision, c.mod_revision, c.version, c.lease, c.val
 FROM kv_meta m LEFT JOIN kv_current c ON c.name = ? WHERE m.name = 'revision'`), key).
		Scan(&rev, &name, &create, &mod, &version, &leaseID, &val)
	if err != nil {
		return 0, nil, fmt.Errorf("sqlstore: get: %w", err)
	}
	if !mod.Valid {
		return rev, nil, nil
	}
	return rev, &KeyValue{Key: name, CreateRevision: create.Int64, ModRevision: mod.Int64, Version: version.Int64, Lease: leaseID.Int64, Value: val}, nil
}

// filtered reports a range whose revision filters drop rows after they
// are read.
func filtered(req RangeRequest) bool {
	return req.MinModRevision > 0 || req.MaxModRevision > 0 || req.MinCreateRevision > 0 || req.MaxCreateRevision > 0
}

// rangeCurrent serves a range of keys at the current revision, in key
// order and without revision filters (etcd's prefix ranges and
// Kubernetes' lists), in a single statement and without a transaction: a
// statement reads one snapshot on every database, so the revision (a
// subquery), the rows and the count (a subquery too, when a limit may cut
// the rows short) agree. A range with no key in it gives no row to carry
// the revision: ok is false, and the caller reads it in a transaction.
func (s *Store) rangeCurrent(ctx context.Context, req RangeRequest) (res *RangeResult, ok bool, err error) {
	start := time.Now()
	defer func() {
		if ok { // a fallback is observed by the transaction that serves it
			s.metrics.sqlDuration.WithLabelValues("read").Observe(time.Since(start).Seconds())
		}
	}()
	kr := newKeyRange(req.Key, req.End)
	if kr.empty() {
		return nil, false, nil
	}
	const revCol = `(SELECT val FROM kv_meta WHERE name = 'revision')`
	res = &RangeResult{}
	w, wargs := kr.where("name", nil)
	if req.CountOnly {
		err := s.c.read.QueryRowContext(ctx, s.q(`SELECT `+revCol+`, COUNT(*) FROM kv_current WHERE `+w), wargs...).
			Scan(&res.Revision, &res.Count)
		if err != nil {
			return nil, false, fmt.Errorf("sqlstore: range: %w", err)
		}
		return res, true, nil
	}
	var (
		sb   strings.Builder
		args []any
	)
	countCol := "0"
	if req.Limit > 0 {
		countCol = `(SELECT COUNT(*) FROM kv_current WHERE ` + w + `)`
		args = append(args, wargs...)
	}
	nameCol, valCol := "name", "val"
	if s.d.ownsBytes {
		// Only a BLOB comes back as a slice of the row's own; a row
		// stored as TEXT (written by another tool) would come back as a
		// string, which database/sql copies into a buffer it reuses.
		nameCol, valCol = "CAST(name AS BLOB)", "CAST(val AS BLOB)"
	}
	if req.KeysOnly {
		valCol = "NULL"
	}
	fmt.Fprintf(&sb, `SELECT %s, %s, %s, create_revision, mod_revision, version, lease, %s FROM kv_current WHERE %s ORDER BY name`, revCol, countCol, nameCol, valCol, w)
	args = append(args, wargs...)
	if req.SortOrder == SortDescend {
		sb.WriteString(" DESC")
	}
	if req.Limit > 0 {
		sb.WriteString(" LIMIT ?")
		args = append(args, req.Limit+1)
	}
	rows, err := s.c.read.QueryContext(ctx, s.q(sb.String()), args...)
	if err != nil {
		return nil, false, fmt.Errorf("sqlstore: range: %w", err)
	}
	defer rows.Close()
	var (
		count    int64
		key, val sql.RawBytes
	)
	for rows.Next() {
		var kv KeyValue
		if err := rows.Scan(&res.Revision, &count, &key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &val); err != nil {
			return nil, false, fmt.Errorf("sqlstore: range: %w", err)
		}
		kv.Key = s.keep(key)
		if len(val) > 0 {
			kv.Value = s.keep(val)
		}
		res.KVs = append(res.KVs, kv)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("sqlstore: range: %w", err)
	}
	if len(res.KVs) == 0 {
		return nil, false, nil
	}
	res.Count = int64(len(res.KVs))
	if req.Limit > 0 {
		res.Count = count
		if int64(len(res.KVs)) > req.Limit {
			res.KVs = res.KVs[:req.Limit]
			res.More = true
		}
	}
	return res, true, nil
}

// keep returns b, scanned as sql.RawBytes, as a slice the caller may keep.
func (s *Store) keep(b sql.RawBytes) []byte {
	if s.d.ownsBytes {
		return b
	}
	return bytes.Clone(b)
}

// rangeAt serves a range inside a transaction whose current revision is cur.
func (s *Store) rangeAt(ctx context.Context, qx queryer, req RangeRequest, cur, compacted int64) (*RangeResult, error) {
	rev := req.Revision
	if rev <= 0 {
		rev = cur
	}
	if rev > cur {
		return nil, ErrFutureRevision
	}
	if rev < compacted {
		return nil, ErrCompacted
	}
	res := &RangeResult{Revision: cur}
	kr := newKeyRange(req.Key, req.End)
	if kr.empty() {
		return res, nil
	}
	historical := rev < cur

	filtered := filtered(req)
	order := req.SortOrder
	if req.SortTarget != SortByKey && order == SortNone {
		order = SortAscend
	}
	// SQL can apply the limit when keys come back in key order and no
	// filter removes rows after the count.
	pushLimit := !filtered && req.SortTarget == SortByKey
	needCount := true

	if !req.CountOnly {
		var (
			sb   strings.Builder
			args []any
		)
		valCol := "val"
		if req.KeysOnly {
			valCol = "''"
		}
		if historical {
			lval := "l.val"
			if req.KeysOnly {
				lval = "''"
			}
			fmt.Fprintf(&sb, `SELECT l.name, l.create_revision, l.revision, l.version, l.lease, %s FROM kv_log l WHERE `, lval)
			var w string
			w, args = kr.where("l.name", args)
			sb.WriteString(w)
			sb.WriteString(` AND l.revision <= ? AND l.deleted = 0 AND l.revision = (SELECT MAX(l2.revision) FROM kv_log l2 WHERE l2.name = l.name AND l2.revision <= ?)`)
			args = append(args, rev, rev)
		} else {
			fmt.Fprintf(&sb, `SELECT name, create_revision, mod_revision, version, lease, %s FROM kv_current WHERE `, valCol)
			var w string
			w, args = kr.where("name", args)
			sb.WriteString(w)
		}
		nameCol := "name"
		if historical {
			nameCol = "l.name"
		}
		if pushLimit {
			if order == SortDescend {
				sb.WriteString(" ORDER BY " + nameCol + " DESC")
			} else {
				sb.WriteString(" ORDER BY " + nameCol)
			}
			if req.Limit > 0 {
				sb.WriteString(" LIMIT ?")
				args = append(args, req.Limit+1)
			}
		} else {
			sb.WriteString(" ORDER BY " + nameCol)
		}
		kvs, err := scanKVs(ctx, qx, s.q(sb.String()), args)
		if err != nil {
			return nil, err
		}
		if pushLimit && (req.Limit <= 0 || int64(len(kvs)) <= req.Limit) {
			// Every key of the range came back: it is the count.
			res.Count = int64(len(kvs))
			needCount = false
		}
		if !pushLimit && !filtered {
			res.Count = int64(len(kvs))
			needCount = false
		}
		if filtered {
			kvs = filterKVs(kvs, req)
		}
		if !pushLimit && order != SortNone {
			sortKVs(kvs, req.SortTarget, order)
		}
		if req.Limit > 0 && int64(len(kvs)) > req.Limit {
			kvs = kvs[:req.Limit]
			res.More = true
		}
		res.KVs = kvs
	}
	if needCount {
		n, err := s.countAt(ctx, qx, kr, rev, historical)
		if err != nil {
			return nil, err
		}
		res.Count = n
	}
	return res, nil
}

func (s *Store) countAt(ctx context.Context, qx queryer, kr keyRange, rev int64, historical bool) (int64, error) {
	var (
		query string
		args  []any
	)
	if historical {
		var w string
		w, args = kr.where("l.name", nil)
		query = `SELECT COUNT(*) FROM kv_log l WHERE ` + w + ` AND l.revision <= ? AND l.deleted = 0 AND l.revision = (SELECT MAX(l2.revision) FROM kv_log l2 WHERE l2.name = l.name AND l2.revision <= ?)`
		args = append(args, rev, rev)
	} else {
		var w string
		w, args = kr.where("name", nil)
		query = `SELECT COUNT(*) FROM kv_current WHERE ` + w
	}
	var n int64
	if err := qx.QueryRowContext(ctx, s.q(query), args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlstore: count: %w", err)
	}
	return n, nil
}

func scanKVs(ctx context.Context, qx queryer, query string, args []any) ([]KeyValue, error) {
	rows, err := qx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: range: %w", err)
	}
	defer rows.Close()
	var kvs []KeyValue
	for rows.Next() {
		var kv KeyValue
		if err := rows.Scan(&kv.Key, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value); err != nil {
			return nil, fmt.Errorf("sqlstore: range: %w", err)
		}
		if len(kv.Value) == 0 {
			kv.Value = nil
		}
		kvs = append(kvs, kv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: range: %w", err)
	}
	return kvs, nil
}

func filterKVs(kvs []KeyValue, req RangeRequest) []KeyValue {
	out := kvs[:0]
	for _, kv := range kvs {
		if req.MinModRevision > 0 && kv.ModRevision < req.MinModRevision {
			continue
		}
		if req.MaxModRevision > 0 && kv.ModRevision > req.MaxModRevision {
			continue
		}
		if req.MinCreateRevision > 0 && kv.CreateRevision < req.MinCreateRevision {
			continue
		}
		if req.MaxCreateRevision > 0 && kv.CreateRevision > req.MaxCreateRevision {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func sortKVs(kvs []KeyValue, target SortTarget, order SortOrder) {
	less := func(a, b *KeyValue) int {
		switch target {
		case SortByVersion:
			return cmpInt(a.Version, b.Version)
		case SortByCreate:
			return cmpInt(a.CreateRevision, b.CreateRevision)
		case SortByMod:
			return cmpInt(a.ModRevision, b.ModRevision)
		case SortByValue:
			return bytes.Compare(a.Value, b.Value)
		}
		return bytes.Compare(a.Key, b.Key)
	}
	sort.SliceStable(kvs, func(i, j int) bool {
		c := less(&kvs[i], &kvs[j])
		if order == SortDescend {
			return c > 0
		}
		return c < 0
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
