package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sqlkube/sqlkube/migrations"
)

// storeTables are the tables of the revision log: the store's size is
// theirs (with their indexes), not the whole database's. A migration that
// adds a table adds it here.
var storeTables = []string{"kv_meta", "kv_current", "kv_log", "leases"}

// Size returns the store's size in bytes, read now; it is what the space
// quota (Options.QuotaBytes) counts and what etcd's Status calls DbSize:
//
//   - SQLite: the database file with its WAL and shared-memory files, as
//     the file system reports them (no SQL);
//   - PostgreSQL: pg_total_relation_size (heap, indexes and TOAST) of the
//     store's tables as the connection's search_path finds them, so a
//     store in a schema of its own counts only its own tables;
//   - MySQL: the files of the store's tables (their InnoDB tablespaces).
//     information_schema.TABLES' data_length and index_length come from
//     InnoDB's statistics, which MariaDB refreshes in the background
//     seconds after 10% of a table's rows changed: a growing store reads
//     as megabytes smaller than it is. The tablespace files are current.
//     Where they cannot be read (innodb_file_per_table off, a database name
//     of non-ASCII characters) the statistics are used.
//
// The quota takes the figure as its latest measurement.
func (s *Store) Size(ctx context.Context) (int64, error) {
	return s.measure(ctx)
}

// size reads the store's size (see Size).
func (s *Store) size(ctx context.Context) (int64, error) {
	var n int64
	var err error
	switch s.d.name {
	case migrations.SQLite:
		n, err = sqliteFilesSize(s.c.sqlitePath)
	case migrations.Postgres:
		err = s.c.read.QueryRowContext(ctx, pgTablesSize).Scan(&n)
	default:
		n, err = s.mysqlSize(ctx)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlstore: size: %w", err)
	}
	return n, nil
}

// SizeInUse returns how much of Size holds data; the rest is free space
// that Defragment can give back. SQLite counts the database's pages that
// are not free, MySQL its statistics' data and index length; PostgreSQL
// has no cheap figure and reports Size.
func (s *Store) SizeInUse(ctx context.Context) (int64, error) {
	var n int64
	var err error
	switch s.d.name {
	case migrations.SQLite:
		err = s.c.read.QueryRowContext(ctx, `SELECT (c.page_count - f.freelist_count) * p.page_size
 FROM pragma_page_count() c, pragma_freelist_count() f, pragma_page_size() p`).Scan(&n)
	case migrations.Postgres:
		n, err = s.size(ctx)
	default:
		n, err = s.mysqlStatsSize(ctx)
		if err == nil {
			var total int64
			if total, err = s.size(ctx); err == nil {
				n = min(n, total)
			}
		}
	}
	if err != nil {
		return 0, fmt.Errorf("sqlstore: size in use: %w", err)
	}
	s.metrics.dbInUse.Set(float64(n))
	return n, nil
}

func sqliteFilesSize(path string) (int64, error) {
	var n int64
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += st.Size()
	}
	return n, nil
}

// pgTablesSize sums the store's tables as its unqualified queries find
// them (to_regclass follows the search_path).
var pgTablesSize = `SELECT COALESCE(SUM(pg_total_relation_size(t)), 0)::bigint FROM unnest(ARRAY[` +
	func() string {
		regs := make([]string, len(storeTables))
		for i, t := range storeTables {
			regs[i] = "to_regclass('" + t + "')"
		}
		return strings.Join(regs, ", ")
	}() + `]) AS t WHERE t IS NOT NULL`

// mysqlTablespaceViews are where MariaDB and MySQL 8 list InnoDB's
// tablespaces with their file sizes.
var mysqlTablespaceViews = []string{"INNODB_SYS_TABLESPACES", "INNODB_TABLESPACES"}

// mysqlSize sums the store's tablespace files, or its statistics where
// they cannot be read.
func (s *Store) mysqlSize(ctx context.Context) (int64, error) {
	names, ok := mysqlTablespaceNames(s.c.database)
	if ok {
		s.sizeMu.Lock()
		views := mysqlTablespaceViews
		if s.spaceView != "" {
			views = []string{s.spaceView}
		}
		s.sizeMu.Unlock()
		args := make([]any, len(names))
		for i, n := range names {
			args[i] = n
		}
		in := "(?" + strings.Repeat(", ?", len(names)-1) + ")"
		for _, view := range views {
			var n, files int64
			err := s.c.read.QueryRowContext(ctx, `SELECT COALESCE(SUM(FILE_SIZE), 0), COUNT(*) FROM information_schema.`+view+
				` WHERE NAME IN `+in, args...).Scan(&n, &files)
			if err != nil {
				if ctx.Err() != nil {
					return 0, err
				}
				continue // no such view here
			}
			s.sizeMu.Lock()
			s.spaceView = view
			s.sizeMu.Unlock()
			if files == int64(len(names)) {
				return n, nil
			}
			break // some tables are not in tablespaces of their own
		}
	}
	return s.mysqlStatsSize(ctx)
}

// mysqlStatsSize is the data and index length InnoDB's statistics give
// the store's tables.
func (s *Store) mysqlStatsSize(ctx context.Context) (int64, error) {
	var n int64
	err := s.c.read.QueryRowContext(ctx, `SELECT COALESCE(SUM(data_length + index_length), 0) FROM information_schema.TABLES
 WHERE table_schema = DATABASE() AND table_name IN ('`+strings.Join(storeTables, "', '")+`')`).Scan(&n)
	return n, err
}

// mysqlTablespaceNames returns the names InnoDB gives the tablespaces of
// the store's tables in database db: "db/table", each part in MySQL's
// file name encoding, where letters, digits and '_' stand for themselves
// and other ASCII characters are "@" and four hex digits. It reports false
// for a name with other characters, whose encoding this does not follow.
func mysqlTablespaceNames(db string) ([]string, bool) {
	var enc strings.Builder
	for i := 0; i < len(db); i++ {
		c := db[i]
		switch {
		case c >= 0x80:
			return nil, false
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
			enc.WriteByte(c)
		default:
			fmt.Fprintf(&enc, "@%04x", c)
		}
	}
	if enc.Len() == 0 {
		return nil, false
	}
	names := make([]string, len(storeTables))
	for i, t := range storeTables {
		names[i] = enc.String() + "/" + t
	}
	return names, true
}
