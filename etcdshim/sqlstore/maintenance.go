package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/sqlkube/sqlkube/migrations"
)

// Defragment gives free space back to the file system where the database
// can: SQLite rewrites the database (VACUUM) after checkpointing the WAL,
// PostgreSQL rewrites the store's tables (VACUUM FULL), MySQL rebuilds them
// (OPTIMIZE TABLE). Like etcd's defragmentation it blocks the store's
// writes while it runs, and it clears no alarm.
//
// SQLite's VACUUM needs free disk space about the size of the database
// (its copy goes through the WAL). Should it fail, the WAL is truncated
// again and the free pages that need no copy have been given back
// (incremental_vacuum) before it ran; the error says so.
func (s *Store) Defragment(ctx context.Context) error {
	var err error
	if s.d.name == migrations.SQLite {
		err = s.defragmentSQLite(ctx)
	} else {
		for _, stmt := range s.d.defrag {
			if err = s.runMaintenance(ctx, stmt); err != nil {
				break
			}
		}
	}
	if _, merr := s.measure(ctx); merr != nil && err == nil {
		s.log.Warn().Err(merr).Msg("measuring the database after defragmentation failed")
	}
	if err != nil {
		return fmt.Errorf("sqlstore: defragment: %w", err)
	}
	return nil
}

func (s *Store) defragmentSQLite(ctx context.Context) error {
	if s.disk.full.Load() {
		// The free pages in bounded steps; VACUUM's copy of the whole
		// database would not fit.
		if err := s.reclaim(ctx); err != nil {
			return err
		}
		return errors.New("VACUUM skipped: the disk is full (the free pages were given back without it)")
	}
	for _, stmt := range []string{`PRAGMA wal_checkpoint(TRUNCATE)`, `PRAGMA incremental_vacuum`, `PRAGMA wal_checkpoint(TRUNCATE)`} {
		if err := s.drainInRoom(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	if _, err := s.c.write.ExecContext(ctx, `VACUUM`); err != nil {
		// A failed VACUUM rolls back; what it wrote to the WAL is given
		// back by the checkpoint.
		_ = drain(context.WithoutCancel(ctx), s.c.write, `PRAGMA wal_checkpoint(TRUNCATE)`)
		return fmt.Errorf("VACUUM (it needs free disk space about the size of the database; free pages were given back without it): %w", err)
	}
	if err := drain(ctx, s.c.write, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("PRAGMA wal_checkpoint(TRUNCATE): %w", err)
	}
	return nil
}

// runMaintenance runs a maintenance statement. MySQL's OPTIMIZE TABLE
// reports a failure as a row whose Msg_type is "error", not as an error:
// those rows are returned as one.
func (s *Store) runMaintenance(ctx context.Context, stmt string) error {
	if s.d.name != migrations.MySQL {
		return drain(ctx, s.c.write, stmt)
	}
	rows, err := s.c.write.QueryContext(ctx, stmt)
	if err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	defer rows.Close()
	var msgs []string
	for rows.Next() {
		var table, op, typ, text sql.NullString
		if err := rows.Scan(&table, &op, &typ, &text); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
		if strings.EqualFold(typ.String, "error") {
			msgs = append(msgs, table.String+": "+text.String)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s: %w", stmt, errors.New(strings.Join(msgs, "; ")))
	}
	return nil
}

// drain runs a statement that may return rows (PRAGMA, OPTIMIZE TABLE) and
// steps through all of them, so the statement runs to its end.
func drain(ctx context.Context, qx queryer, stmt string) error {
	rows, err := qx.QueryContext(ctx, stmt)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}
