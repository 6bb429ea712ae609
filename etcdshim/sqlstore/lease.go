package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// now is the lease clock: wall time in milliseconds, shared by every instance
// on a database and kept across restarts.
func now() int64 { return time.Now().UnixMilli() }

func randomLeaseID() int64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return time.Now().UnixNano() & (1<<62 - 1)
	}
	// Positive and never 0 (0 means "no lease").
	return int64(binary.BigEndian.Uint64(b[:])>>2) | 1
}

// LeaseGrant creates a lease with the given ID (0: the store picks one) and
// TTL in seconds. Its expiry is stored, so it survives restarts.
func (s *Store) LeaseGrant(ctx context.Context, id, ttl int64) (*Lease, error) {
	if ttl > MaxLeaseTTL {
		return nil, ErrLeaseTTLTooBig
	}
	if ttl < 1 {
		ttl = 1
	}
	if err := s.checkQuota(ctx, leaseOverhead); err != nil {
		return nil, err
	}
	pick := id == 0
	for attempt := 0; attempt < 5; attempt++ {
		if pick {
			id = randomLeaseID()
		}
		var n int64
		if err := s.c.read.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM leases WHERE id = ?`), id).Scan(&n); err != nil {
			return nil, fmt.Errorf("sqlstore: lease grant: %w", err)
		}
		if n == 0 {
			expiresAt := now() + ttl*1000
			err := s.insertLease(ctx, id, ttl, expiresAt)
			if err == nil {
				s.leases.saw(expiresAt)
				s.wrote(leaseOverhead)
				s.metrics.leaseOps.WithLabelValues("grant").Inc()
				return &Lease{ID: id, TTL: ttl, Remaining: ttl}, nil
			}
			if err := s.noteDiskFull(err); errors.Is(err, ErrDiskFull) {
				return nil, fmt.Errorf("sqlstore: lease grant: %w", err)
			}
			// A concurrent grant of the same ID wins; check again.
			if err2 := s.c.read.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM leases WHERE id = ?`), id).Scan(&n); err2 != nil || n == 0 {
				return nil, fmt.Errorf("sqlstore: lease grant: %w", err)
			}
		}
		if !pick {
			return nil, ErrLeaseExists
		}
	}
	return nil, fmt.Errorf("sqlstore: lease grant: no free lease ID found")
}

// insertLease writes a lease row. On a shared pool it announces the grant
// in the same transaction, so the other instances on the tenant's schema
// learn its expiry (see leaseClock).
func (s *Store) insertLease(ctx context.Context, id, ttl, expiresAt int64) error {
	const insert = `INSERT INTO leases (id, ttl, expires_at) VALUES (?, ?, ?)`
	if s.leaseNotify == "" {
		_, err := s.c.write.ExecContext(ctx, s.q(insert), id, ttl, expiresAt)
		return err
	}
	tx, err := s.c.write.BeginTx(ctx, s.d.writeTx)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, s.q(insert), id, ttl, expiresAt); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.leaseNotify); err != nil {
		return err
	}
	return tx.Commit()
}

// LeaseRevoke deletes the lease and every key attached to it, at one
// revision.
func (s *Store) LeaseRevoke(ctx context.Context, id int64) (int64, error) {
	_, rev, err := s.write(ctx, func(a *applier) (any, error) { return nil, a.revoke(id, false) })
	if err == nil {
		s.metrics.leaseOps.WithLabelValues("revoke").Inc()
	}
	return rev, err
}

// revoke removes lease id and its keys. With onlyExpired it does nothing to
// a lease that is not (or no longer) expired.
func (a *applier) revoke(id int64, onlyExpired bool) error {
	var expiresAt int64
	err := a.qx.QueryRowContext(a.ctx, a.s.q(`SELECT expires_at FROM leases WHERE id = ?`), id).Scan(&expiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		if onlyExpired {
			return nil
		}
		return ErrLeaseNotFound
	}
	if err != nil {
		return fmt.Errorf("sqlstore: read lease: %w", err)
	}
	if onlyExpired && expiresAt > now() {
		return nil
	}
	kvs, err := a.scanKVsFlushed(a.s.q(`SELECT name, create_revision, mod_revision, version, lease, val FROM kv_current WHERE lease = ? ORDER BY name`), []any{id})
	if err != nil {
		return err
	}
	if err := a.deleteKVs(kvs, "lease = ?", []any{id}); err != nil {
		return err
	}
	if _, err := a.qx.ExecContext(a.ctx, a.s.q(`DELETE FROM leases WHERE id = ?`), id); err != nil {
		return fmt.Errorf("sqlstore: delete lease: %w", err)
	}
	return nil
}

// LeaseKeepAlive renews the lease and returns its TTL. An unknown or expired
// lease gives ErrLeaseNotFound.
func (s *Store) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	var ttl int64
	if s.d.keepAlive != "" {
		t := now()
		err := s.c.write.QueryRowContext(ctx, s.q(s.d.keepAlive), t, id, t).Scan(&ttl)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, ErrLeaseNotFound
		}
		if err != nil {
			return 0, fmt.Errorf("sqlstore: lease keepalive: %w", err)
		}
		s.metrics.leaseOps.WithLabelValues("keepalive").Inc()
		return ttl, nil
	}
	err := s.c.read.QueryRowContext(ctx, s.q(`SELECT ttl FROM leases WHERE id = ?`), id).Scan(&ttl)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrLeaseNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("sqlstore: lease keepalive: %w", err)
	}
	t := now()
	res, err := s.execInRoom(ctx, s.q(`UPDATE leases SET expires_at = ? WHERE id = ? AND expires_at > ?`), t+ttl*1000, id, t)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: lease keepalive: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return 0, ErrLeaseNotFound
	}
	s.metrics.leaseOps.WithLabelValues("keepalive").Inc()
	return ttl, nil
}

// LeaseTimeToLive describes a lease, with its keys if asked.
func (s *Store) LeaseTimeToLive(ctx context.Context, id int64, keys bool) (*Lease, error) {
	l := &Lease{ID: id}
	var expiresAt int64
	err := s.c.read.QueryRowContext(ctx, s.q(`SELECT ttl, expires_at FROM leases WHERE id = ?`), id).Scan(&l.TTL, &expiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrLeaseNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: lease ttl: %w", err)
	}
	left := expiresAt - now()
	if left <= 0 {
		return nil, ErrLeaseNotFound
	}
	l.Remaining = (left + 999) / 1000
	if keys {
		rows, err := s.c.read.QueryContext(ctx, s.q(`SELECT name FROM kv_current WHERE lease = ? ORDER BY name`), id)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: lease keys: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var k []byte
			if err := rows.Scan(&k); err != nil {
				return nil, err
			}
			l.Keys = append(l.Keys, k)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Leases lists the IDs of live leases.
func (s *Store) Leases(ctx context.Context) ([]int64, error) {
	rows, err := s.c.read.QueryContext(ctx, s.q(`SELECT id FROM leases WHERE expires_at > ? ORDER BY id`), now())
	if err != nil {
		return nil, fmt.Errorf("sqlstore: leases: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// expireLeasesNow revokes expired leases; runEvery calls it each
// LeaseCheckInterval. Every instance does; revoking re-checks expiry under
// the writer's lock, so they never race.
func (s *Store) expireLeasesNow(ctx context.Context) {
	if err := s.expireLeases(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, ErrClosed) {
		s.log.Warn().Err(err).Msg("lease expiry failed; retrying")
	}
}

func (s *Store) expireLeases(ctx context.Context) error {
	rows, err := s.c.read.QueryContext(ctx, s.q(`SELECT id FROM leases WHERE expires_at <= ? ORDER BY expires_at LIMIT 1000`), now())
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if _, _, err := s.write(ctx, func(a *applier) (any, error) { return nil, a.revoke(id, true) }); err != nil {
			return err
		}
		s.metrics.leaseOps.WithLabelValues("expire").Inc()
	}
	return nil
}
