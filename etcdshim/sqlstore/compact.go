package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlkube/sqlkube/migrations"
)

// Compact makes revisions below rev unreadable and, after that is
// committed, removes the history they alone needed. Reads at rev itself stay
// possible; watches must start above it.
func (s *Store) Compact(ctx context.Context, rev int64) (cur int64, err error) {
	began := time.Now()
	defer func() {
		switch {
		case errors.Is(err, ErrCompacted), errors.Is(err, ErrFutureRevision):
			// the request's, not the compaction's
		case err != nil:
			s.metrics.compactions.WithLabelValues("failed").Inc()
		default:
			s.metrics.compactions.WithLabelValues("succeeded").Inc()
			s.metrics.compactTime.Observe(time.Since(began).Seconds())
		}
	}()
	_, cur, err = s.write(ctx, func(a *applier) (any, error) {
		if rev > a.rev {
			return nil, ErrFutureRevision
		}
		if rev <= a.compacted {
			return nil, ErrCompacted
		}
		a.compacted = rev
		return nil, nil
	})
	if err != nil {
		return cur, err
	}
	start := time.Now()
	if err := s.removeHistory(ctx, rev); err != nil {
		return cur, err
	}
	s.log.Debug().Int64("revision", rev).Dur("took", time.Since(start)).Msg("compacted")
	return cur, nil
}

// removeHistory deletes log rows superseded at or below rev, in steps so
// no transaction grows large. It logs how long each phase held the
// writer's connection (on SQLite the writer's batches wait for it).
func (s *Store) removeHistory(ctx context.Context, rev int64) error {
	// While the disk is full, smaller steps, each checkpointed, keep the
	// WAL within the reserve.
	step := int64(10000)
	full := s.disk.full.Load()
	if full {
		step = 1000
	}
	var lo int64
	if err := s.c.read.QueryRowContext(ctx, `SELECT COALESCE(MIN(revision), 0) FROM kv_log`).Scan(&lo); err != nil {
		return fmt.Errorf("sqlstore: compact: %w", err)
	}
	var (
		steps, removed    int64
		deleting, longest time.Duration
	)
	for upTo := min(lo+step, rev); ; upTo = min(upTo+step, rev) {
		// Superseded at upTo means superseded at rev too: a newer version
		// at or below upTo is at or below rev.
		start := time.Now()
		res, err := s.execInRoom(ctx, s.q(s.d.compact), upTo, upTo)
		if err != nil {
			return fmt.Errorf("sqlstore: compact: %w", err)
		}
		if full = full || s.disk.full.Load(); full && s.d.name == migrations.SQLite {
			if err := s.checkpointTruncate(ctx); err != nil {
				return fmt.Errorf("sqlstore: compact: %w", err)
			}
		}
		took := time.Since(start)
		deleting += took
		longest = max(longest, took)
		steps++
		if n, err := res.RowsAffected(); err == nil {
			removed += n
		}
		if upTo >= rev {
			break
		}
	}
	var vacuum, checkpoint time.Duration
	switch {
	case s.d.name == migrations.SQLite && full:
		// The free pages in bounded steps (see reclaim).
		start := time.Now()
		if err := s.reclaim(ctx); err != nil {
			return fmt.Errorf("sqlstore: compact: %w", err)
		}
		vacuum = time.Since(start)
	case s.d.name == migrations.SQLite:
		// incremental_vacuum frees one page per step, so it is run as a
		// query and stepped to the end; Exec would step it once.
		start := time.Now()
		if err := s.drainInRoom(ctx, `PRAGMA incremental_vacuum`); err != nil {
			return fmt.Errorf("sqlstore: compact: vacuum: %w", err)
		}
		vacuum = time.Since(start)
		start = time.Now()
		if err := s.drainInRoom(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return fmt.Errorf("sqlstore: compact: checkpoint: %w", err)
		}
		checkpoint = time.Since(start)
	}
	s.log.Info().Int64("revision", rev).Int64("removed", removed).Int64("steps", steps).Dur("deleting", deleting).
		Dur("longestStep", longest).Dur("vacuum", vacuum).Dur("checkpoint", checkpoint).Msg("history removed")
	if _, err := s.measure(ctx); err != nil {
		s.log.Warn().Err(err).Msg("measuring the database after compaction failed")
	}
	return nil
}

// autoCompact compacts to CompactionRetention revisions behind the head;
// runEvery calls it each CompactionInterval.
// It reads nothing when no revision was committed or followed since its
// last run, so an idle store runs no SQL for it.
func (s *Store) autoCompact(ctx context.Context) {
	known, _ := s.KnownRevisions()
	if known == s.compactedAt.Load() {
		return
	}
	cur, compacted, err := s.Revisions(ctx)
	if err != nil {
		return
	}
	target := cur - s.opts.CompactionRetention
	if target <= compacted {
		s.compactedAt.Store(known)
		return
	}
	if _, err := s.Compact(ctx, target); err != nil && !errors.Is(err, ErrCompacted) && ctx.Err() == nil {
		s.log.Warn().Err(err).Int64("revision", target).Msg("automatic compaction failed")
	} else {
		s.compactedAt.Store(known)
		if err == nil {
			s.log.Info().Int64("revision", target).Msg("automatic compaction")
		}
	}
}

// runEvery calls fn every d until the store closes. The caller has added
// to s.wg.
func (s *Store) runEvery(d time.Duration, fn func(ctx context.Context)) {
	defer s.wg.Done()
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-s.stopCtx.Done():
			return
		case <-tick.C:
			fn(s.stopCtx)
		}
	}
}
