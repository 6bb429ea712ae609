package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Put writes one key. It returns the result and the revision of the write.
func (s *Store) Put(ctx context.Context, req PutRequest) (*PutResult, int64, error) {
	if err := checkKey(req.Key); err != nil {
		return nil, 0, err
	}
	cost := putCost(&req)
	if err := s.checkQuota(ctx, cost); err != nil {
		return nil, 0, err
	}
	var keys [][]byte
	if s.d.readAhead {
		keys = [][]byte{req.Key}
	}
	val, rev, err := s.writeKeys(ctx, keys, true, func(a *applier) (any, error) { return a.put(&req) })
	if err != nil {
		return nil, rev, err
	}
	s.wrote(cost)
	return val.(*PutResult), rev, nil
}

// DeleteRange removes keys. It returns the result and the store's revision
// after it (unchanged if nothing was deleted).
func (s *Store) DeleteRange(ctx context.Context, req DeleteRequest) (*DeleteResult, int64, error) {
	if len(req.Key) == 0 && len(req.End) == 0 {
		return nil, 0, ErrEmptyKey
	}
	val, rev, err := s.write(ctx, func(a *applier) (any, error) { return a.deleteRange(&req) })
	if err != nil {
		return nil, rev, err
	}
	return val.(*DeleteResult), rev, nil
}

// Txn runs a transaction atomically at one revision. Read-only
// transactions run on a snapshot without queueing behind writes.
func (s *Store) Txn(ctx context.Context, req *TxnRequest) (*TxnResult, error) {
	if err := checkTxn(req); err != nil {
		return nil, err
	}
	if !req.IsWrite() {
		var res *TxnResult
		err := s.readTx(ctx, func(tx *sql.Tx) error {
			cur, compacted, err := s.revisions(ctx, tx)
			if err != nil {
				return err
			}
			a := &applier{s: s, ctx: ctx, qx: tx, rev: cur, compacted: compacted}
			res, err = a.txn(req, newResultBudget(req.MaxResultBytes))
			if res != nil {
				res.Revision = cur
			}
			return err
		})
		return res, err
	}
	cost := txnCost(req)
	if err := s.checkQuota(ctx, cost); err != nil {
		return nil, err
	}
	var keys [][]byte
	if s.d.readAhead {
		keys = txnKeys(nil, req)
	}
	val, rev, err := s.writeKeys(ctx, keys, cost > 0, func(a *applier) (any, error) { return a.txn(req, newResultBudget(req.MaxResultBytes)) })
	if err != nil {
		return nil, err
	}
	res := val.(*TxnResult)
	res.Revision = rev
	if res.Succeeded {
		s.wrote(opsCost(req.Success))
	} else {
		s.wrote(opsCost(req.Failure))
	}
	return res, nil
}

// txnKeys appends the keys a txn compares or puts by name to keys.
func txnKeys(keys [][]byte, req *TxnRequest) [][]byte {
	for _, c := range req.Compare {
		if len(c.End) == 0 {
			keys = append(keys, c.Key)
		}
	}
	for _, ops := range [][]Op{req.Success, req.Failure} {
		for _, op := range ops {
			switch {
			case op.Put != nil:
				keys = append(keys, op.Put.Key)
			case op.Txn != nil:
				keys = txnKeys(keys, op.Txn)
			}
		}
	}
	return keys
}

func checkKey(key []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if len(key) > MaxKeySize {
		return ErrKeyTooLong
	}
	return nil
}

// checkTxn validates a txn as etcd does: keys present, no key written twice
// by one branch, no put inside a range the same branch deletes. The keys of
// every level are checked first, then the writes of each branch, whose
// check covers the txns nested in it.
func checkTxn(req *TxnRequest) error {
	for _, ops := range [][]Op{req.Success, req.Failure} {
		if err := checkOps(ops); err != nil {
			return err
		}
	}
	for _, ops := range [][]Op{req.Success, req.Failure} {
		if _, _, err := branchWrites(ops); err != nil {
			return err
		}
	}
	return nil
}

// checkOps checks the keys of ops, and of the txns nested in them.
func checkOps(ops []Op) error {
	for _, op := range ops {
		switch {
		case op.Put != nil:
			if err := checkKey(op.Put.Key); err != nil {
				return err
			}
		case op.Delete != nil:
			if len(op.Delete.Key) == 0 && len(op.Delete.End) == 0 {
				return ErrEmptyKey
			}
		case op.Range != nil:
			if len(op.Range.Key) == 0 && len(op.Range.End) == 0 {
				return ErrEmptyKey
			}
		case op.Txn != nil:
			if err := checkOps(op.Txn.Success); err != nil {
				return err
			}
			if err := checkOps(op.Txn.Failure); err != nil {
				return err
			}
		}
	}
	return nil
}

// branchWrites returns the keys a branch puts and the ranges it deletes,
// failing with ErrDuplicateKey on an overlap. The two branches of a nested
// txn exclude each other, so they may put the same key.
func branchWrites(ops []Op) (map[string]struct{}, []keyRange, error) {
	var dels []keyRange
	for _, op := range ops {
		if op.Delete != nil {
			dels = append(dels, newKeyRange(op.Delete.Key, op.Delete.End))
		}
	}
	var deleted delSet
	deleted.add(dels)
	inDels := func(k string) bool { return deleted.contains([]byte(k)) }
	puts := map[string]struct{}{}
	for _, op := range ops {
		if op.Txn == nil {
			continue
		}
		putsThen, delsThen, err := branchWrites(op.Txn.Success)
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := branchWrites(op.Txn.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range putsThen {
			if _, dup := puts[k]; dup || inDels(k) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, dup := puts[k]; dup {
				if _, same := putsThen[k]; !same {
					return nil, nil, ErrDuplicateKey
				}
			}
			if inDels(k) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = struct{}{}
		}
		nested := append(delsThen, delsElse...)
		deleted.add(nested)
		dels = append(dels, nested...)
	}
	for _, op := range ops {
		if op.Put == nil {
			continue
		}
		k := string(op.Put.Key)
		if _, dup := puts[k]; dup || inDels(k) {
			return nil, nil, ErrDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}

// resultBudget is what the ranges of a txn may still read (see
// TxnRequest.MaxResultBytes); nil for no limit.
type resultBudget struct{ left int64 }

func newResultBudget(max int64) *resultBudget {
	if max <= 0 {
		return nil
	}
	return &resultBudget{left: max}
}

// spend charges a range's result to the budget: ErrResultTooLarge once it
// has run out.
func (b *resultBudget) spend(r *RangeResult) error {
	if b == nil || r == nil {
		return nil
	}
	for i := range r.KVs {
		b.left -= int64(len(r.KVs[i].Key)+len(r.KVs[i].Value)) + 32
	}
	if b.left < 0 {
		return ErrResultTooLarge
	}
	return nil
}

func (a *applier) txn(req *TxnRequest, budget *resultBudget) (*TxnResult, error) {
	ok := true
	for _, c := range req.Compare {
		held, err := a.compare(c)
		if err != nil {
			return nil, err
		}
		if !held {
			ok = false
			break
		}
	}
	ops := req.Success
	if !ok {
		ops = req.Failure
	}
	res := &TxnResult{Succeeded: ok, Results: make([]OpResult, 0, len(ops))}
	for _, op := range ops {
		var r OpResult
		var err error
		switch {
		case op.Range != nil:
			if err = a.flush(); err == nil {
				r.Range, err = a.s.rangeAt(a.ctx, a.qx, *op.Range, a.readRevision(), a.compacted)
			}
			if err == nil {
				err = budget.spend(r.Range)
			}
		case op.Put != nil:
			r.Put, err = a.put(op.Put)
		case op.Delete != nil:
			r.Delete, err = a.deleteRange(op.Delete)
		case op.Txn != nil:
			r.Txn, err = a.txn(op.Txn, budget)
			if r.Txn != nil {
				r.Txn.Revision = a.readRevision()
			}
		}
		if err != nil {
			return nil, err
		}
		res.Results = append(res.Results, r)
	}
	return res, nil
}

// compare evaluates one compare against the state the request sees.
func (a *applier) compare(c Compare) (bool, error) {
	kr := newKeyRange(c.Key, c.End)
	switch {
	case kr.single():
		kv, err := a.current(c.Key)
		if err != nil {
			return false, err
		}
		if kv != nil {
			return compareKV(c, kv), nil
		}
	case !kr.empty():
		return a.compareRange(c, kr)
	}
	return compareMissing(c), nil
}

// compareMissing is a compare's result on a range with no key: a value
// compare fails (etcd has no missing value), the others compare zeros.
func compareMissing(c Compare) bool {
	return c.Target != CompareValue && compareKV(c, &KeyValue{})
}

// compareColumns are the kv_current columns compares read, by target, and
// compareFails the condition under which a key fails a compare, by result.
var (
	compareColumns = map[CompareTarget]string{
		CompareVersion: "version", CompareCreate: "create_revision", CompareMod: "mod_revision",
		CompareValue: "val", CompareLease: "lease",
	}
	compareFails = map[CompareResult]string{
		CompareEqual: " <> ?", CompareNotEqual: " = ?", CompareGreater: " <= ?", CompareLess: " >= ?",
	}
)

// compareRange evaluates a compare over a range in the database: it holds
// if no key in the range fails it and the range has a key. Nothing is read
// into memory: a txn may hold thousands of compares over a large range,
// and reading the range's values for each took seconds on a store of a
// megabyte. Values compare as bytes.Compare does on every backend (SQLite
// BLOB, PostgreSQL bytea and MySQL LONGBLOB compare bytes, then lengths).
func (a *applier) compareRange(c Compare, kr keyRange) (bool, error) {
	col, knownTarget := compareColumns[c.Target]
	fails, knownResult := compareFails[c.Result]
	if !knownTarget || !knownResult {
		// As compareKV: an unknown target compares equal, an unknown
		// result fails, whatever the keys.
		return compareKV(c, &KeyValue{}), nil
	}
	if err := a.flush(); err != nil {
		return false, err
	}
	w, args := kr.where("name", nil)
	var arg any = c.Number
	if c.Target == CompareValue {
		arg = nonNil(c.Value)
	}
	failed, err := a.exists(`SELECT 1 FROM kv_current WHERE `+w+` AND `+col+fails+` LIMIT 1`, append(args[:len(args):len(args)], arg))
	if err != nil || failed {
		return false, err
	}
	some, err := a.exists(`SELECT 1 FROM kv_current WHERE `+w+` LIMIT 1`, args)
	if err != nil || some {
		return some, err
	}
	return compareMissing(c), nil
}

// exists reports whether a query returns a row.
func (a *applier) exists(query string, args []any) (bool, error) {
	var one int
	err := a.qx.QueryRowContext(a.ctx, a.s.q(query), args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sqlstore: compare: %w", err)
	}
	return true, nil
}

func compareKV(c Compare, kv *KeyValue) bool {
	var r int
	switch c.Target {
	case CompareValue:
		r = bytes.Compare(kv.Value, c.Value)
	case CompareVersion:
		r = cmpInt(kv.Version, c.Number)
	case CompareCreate:
		r = cmpInt(kv.CreateRevision, c.Number)
	case CompareMod:
		r = cmpInt(kv.ModRevision, c.Number)
	case CompareLease:
		r = cmpInt(kv.Lease, c.Number)
	}
	switch c.Result {
	case CompareEqual:
		return r == 0
	case CompareGreater:
		return r > 0
	case CompareLess:
		return r < 0
	case CompareNotEqual:
		return r != 0
	}
	return false
}

// current reads the live version of key, nil if it does not exist.
func (a *applier) current(key []byte) (*KeyValue, error) {
	if kv, ok := a.known[string(key)]; ok {
		if kv == nil {
			return nil, nil
		}
		c := *kv
		return &c, nil
	}
	kv := &KeyValue{Key: key}
	err := a.qx.QueryRowContext(a.ctx, a.s.q(`SELECT create_revision, mod_revision, version, lease, val FROM kv_current WHERE name = ?`), key).
		Scan(&kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease, &kv.Value)
	if errors.Is(err, sql.ErrNoRows) {
		a.remember(key, nil)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: read key: %w", err)
	}
	a.remember(key, kv)
	return kv, nil
}

func (a *applier) leaseExists(id int64) (bool, error) {
	var n int64
	err := a.qx.QueryRowContext(a.ctx, a.s.q(`SELECT COUNT(*) FROM leases WHERE id = ?`), id).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("sqlstore: read lease: %w", err)
	}
	return n > 0, nil
}

func (a *applier) put(p *PutRequest) (*PutResult, error) {
	if a.s.d.upsertPut != "" && a.deferred == nil && !p.IgnoreValue && !p.IgnoreLease {
		return a.upsert(p)
	}
	prev, err := a.current(p.Key)
	if err != nil {
		return nil, err
	}
	if (p.IgnoreValue || p.IgnoreLease) && prev == nil {
		return nil, ErrKeyNotFound
	}
	lease := p.Lease
	if p.IgnoreLease {
		lease = prev.Lease
	} else if lease != 0 {
		if err := a.requireLease(lease); err != nil {
			return nil, err
		}
	}
	value := p.Value
	if p.IgnoreValue {
		value = prev.Value
	}
	if value == nil {
		value = []byte{}
	}
	rev := a.rev + 1
	kv := KeyValue{Key: p.Key, Value: value, CreateRevision: rev, ModRevision: rev, Version: 1, Lease: lease}
	var prevRev int64
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
		prevRev = prev.ModRevision
	}
	switch {
	case a.deferred != nil:
		a.deferred.putCurrent(kv)
	case prev != nil:
		_, err = a.qx.ExecContext(a.ctx, a.s.q(`UPDATE kv_current SET mod_revision = ?, version = ?, lease = ?, val = ? WHERE name = ?`),
			kv.ModRevision, kv.Version, kv.Lease, kv.Value, kv.Key)
	default:
		_, err = a.qx.ExecContext(a.ctx, a.s.q(`INSERT INTO kv_current (name, create_revision, mod_revision, version, lease, val) VALUES (?, ?, ?, ?, ?, ?)`),
			kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, kv.Value)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: write key: %w", err)
	}
	if err := a.appendLog(&kv, false, prevRev); err != nil {
		return nil, err
	}
	return a.putDone(p, kv, prev), nil
}

// upsert is put in one statement, where the dialect has one: for puts
// that set both value and lease.
func (a *applier) upsert(p *PutRequest) (*PutResult, error) {
	if p.Lease != 0 {
		if err := a.requireLease(p.Lease); err != nil {
			return nil, err
		}
	}
	value := nonNil(p.Value)
	rev := a.rev + 1
	a.sub++
	rows, err := a.qx.QueryContext(a.ctx, a.s.d.upsertPut, p.Key, rev, p.Lease, value, a.sub)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: write key: %w", err)
	}
	defer rows.Close()
	var prev *KeyValue
	for rows.Next() {
		prev = &KeyValue{Key: p.Key}
		if err := rows.Scan(&prev.CreateRevision, &prev.ModRevision, &prev.Version, &prev.Lease, &prev.Value); err != nil {
			return nil, fmt.Errorf("sqlstore: write key: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: write key: %w", err)
	}
	kv := KeyValue{Key: p.Key, Value: value, CreateRevision: rev, ModRevision: rev, Version: 1, Lease: p.Lease}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
	}
	return a.putDone(p, kv, prev), nil
}

// requireLease fails with ErrLeaseNotFound when lease id does not exist.
func (a *applier) requireLease(id int64) error {
	ok, err := a.leaseExists(id)
	if err != nil {
		return err
	}
	if !ok {
		return ErrLeaseNotFound
	}
	return nil
}

// putDone records a written put (kv, over prev) for the request's later
// reads and its watchers, and answers it.
func (a *applier) putDone(p *PutRequest, kv KeyValue, prev *KeyValue) *PutResult {
	a.remember(kv.Key, &kv)
	a.events = append(a.events, Event{Type: EventPut, KV: kv, PrevKV: prev})
	res := &PutResult{}
	if p.PrevKV {
		res.PrevKV = prev
	}
	return res
}

func (a *applier) appendLog(kv *KeyValue, deleted bool, prevRev int64) error {
	del := 0
	if deleted {
		del = 1
	}
	a.sub++
	if a.deferred != nil {
		a.deferred.log = append(a.deferred.log, logRow{rev: kv.ModRevision, sub: int64(a.sub), name: kv.Key, deleted: del,
			create: kv.CreateRevision, version: kv.Version, lease: kv.Lease, prev: prevRev, val: kv.Value})
		return nil
	}
	_, err := a.qx.ExecContext(a.ctx, a.s.q(`INSERT INTO kv_log (revision, sub, name, deleted, create_revision, version, lease, prev_revision, val) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		kv.ModRevision, a.sub, kv.Key, del, kv.CreateRevision, kv.Version, kv.Lease, prevRev, nonNil(kv.Value))
	if err != nil {
		return fmt.Errorf("sqlstore: append log: %w", err)
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (a *applier) deleteRange(d *DeleteRequest) (*DeleteResult, error) {
	kr := newKeyRange(d.Key, d.End)
	res := &DeleteResult{}
	if kr.empty() {
		return res, nil
	}
	w, args := kr.where("name", nil)
	kvs, err := a.scanKVsFlushed(a.s.q(`SELECT name, create_revision, mod_revision, version, lease, val FROM kv_current WHERE `+w+` ORDER BY name`), args)
	if err != nil {
		return nil, err
	}
	if err := a.deleteKVs(kvs, w, args); err != nil {
		return nil, err
	}
	res.Deleted = int64(len(kvs))
	if d.PrevKV {
		res.PrevKVs = kvs
	}
	return res, nil
}

// deleteKVs removes the live keys kvs, which are exactly the rows matching
// the condition where/args, and logs their tombstones.
func (a *applier) deleteKVs(kvs []KeyValue, where string, args []any) error {
	if len(kvs) == 0 {
		return nil
	}
	if _, err := a.qx.ExecContext(a.ctx, a.s.q(`DELETE FROM kv_current WHERE `+where), args...); err != nil {
		return fmt.Errorf("sqlstore: delete keys: %w", err)
	}
	rev := a.rev + 1
	for i := range kvs {
		prev := kvs[i]
		tomb := KeyValue{Key: prev.Key, ModRevision: rev}
		if err := a.appendLog(&tomb, true, prev.ModRevision); err != nil {
			return err
		}
		a.remember(prev.Key, nil)
		a.events = append(a.events, Event{Type: EventDelete, KV: tomb, PrevKV: &prev})
	}
	return nil
}
