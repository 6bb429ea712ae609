package sqlstore

import (
	"context"
	"fmt"
)

// Size returns the database's size in bytes as the database reports it.
func (s *Store) Size(ctx context.Context) (int64, error) {
	var n int64
	if err := s.c.read.QueryRowContext(ctx, s.d.size).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlstore: size: %w", err)
	}
	return n, nil
}

// Defragment gives free space back to the file system where the database
// can (SQLite VACUUM, PostgreSQL VACUUM FULL, MySQL OPTIMIZE TABLE).
func (s *Store) Defragment(ctx context.Context) error {
	for _, stmt := range s.d.defrag {
		if err := drain(ctx, s.c.write, stmt); err != nil {
			return fmt.Errorf("sqlstore: defragment: %w", err)
		}
	}
	s.metrics.observeSize(s)
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
