package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" database/sql driver

	"github.com/sqlkube/sqlkube/migrations"
)

// DefaultDSN is the datastore used when none is given.
const DefaultDSN = "sqlite://./sqlkube-data/state.db"

// conns is the set of connection pools a store uses.
type conns struct {
	d dialect
	// write runs the writer's transactions; read serves everything else.
	// They differ only on SQLite, where the writer's pool begins IMMEDIATE
	// transactions on a single connection.
	write, read *sql.DB
	// pgDSN is set on PostgreSQL, for the LISTEN connection.
	pgDSN string
	// openMigrate opens a pool of its own for golang-migrate, which closes it.
	openMigrate func() (*sql.DB, error)
	// describe names the datastore in logs without secrets.
	describe string
	// sqlitePath is the database file on SQLite; database names the
	// database on MySQL. Size reads them.
	sqlitePath, database string
}

func (c *conns) close() error {
	var errs []error
	if c.write != nil && c.write != c.read {
		errs = append(errs, c.write.Close())
	}
	if c.read != nil {
		errs = append(errs, c.read.Close())
	}
	return errors.Join(errs...)
}

// Dialect returns the migrations dialect a DSN selects, or an error for an
// unknown scheme.
func Dialect(dsn string) (migrations.Dialect, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite://"):
		return migrations.SQLite, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return migrations.Postgres, nil
	case strings.HasPrefix(dsn, "mysql://"):
		return migrations.MySQL, nil
	}
	return "", fmt.Errorf("sqlstore: unknown datastore %q: want sqlite:///path, postgres://… or mysql://…", redact(dsn))
}

// openConns parses the DSN, creates the database if it does not exist, and
// opens its pools.
func openConns(ctx context.Context, dsn string) (*conns, error) {
	d, err := Dialect(dsn)
	if err != nil {
		return nil, err
	}
	switch d {
	case migrations.SQLite:
		return openSQLite(dsn)
	case migrations.Postgres:
		return openPostgres(ctx, dsn)
	default:
		return openMySQL(ctx, dsn)
	}
}

func sqlitePath(dsn string) (string, error) {
	p := strings.TrimPrefix(dsn, "sqlite://")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" {
		return "", fmt.Errorf("sqlstore: sqlite datastore %q has no path", dsn)
	}
	return filepath.Abs(p)
}

func openSQLite(dsn string) (*conns, error) {
	path, err := sqlitePath(dsn)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlstore: create data directory: %w", err)
	}
	uri := "file:" + (&url.URL{Path: path}).EscapedPath()
	if err := createSQLite(path, uri); err != nil {
		return nil, err
	}
	// WAL with synchronous=FULL: a commit is fsynced before it returns.
	// Page size and auto_vacuum are set once, by createSQLite.
	file := uri + "?_synchronous=FULL&_busy_timeout=10000&_cache_size=-32000&_stmt_cache_size=64"
	base := file + "&_journal_mode=WAL"
	write, err := sql.Open("sqlite3", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open sqlite: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetConnMaxIdleTime(0)
	read, err := sql.Open("sqlite3", file+"&_txlock=deferred")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlstore: open sqlite: %w", err)
	}
	read.SetMaxOpenConns(16)
	read.SetMaxIdleConns(16)
	return &conns{
		d:     sqliteDialect,
		write: write,
		read:  read,
		openMigrate: func() (*sql.DB, error) {
			db, err := sql.Open("sqlite3", base+"&_txlock=immediate")
			if err == nil {
				db.SetMaxOpenConns(1)
			}
			return db, err
		},
		describe:   "sqlite://" + path,
		sqlitePath: path,
	}, nil
}

// sqlitePageSize is the page size of new SQLite databases. SQLite keeps
// rows of a WITHOUT ROWID table (kv_current, kv_log) in their pages only up
// to about a quarter of the page; the rest of a larger row goes to overflow
// pages, one more read per row. Kubernetes objects are mostly 0.5-4 KiB
// (a pod is about 2.3 KiB as stored), which at SQLite's default 4 KiB
// pages overflow from 1 KiB up. With 16 KiB pages, rows up to about 4 KiB
// stay whole: docs/benchmarks.md measures ranges of 1 KiB values about 25%
// faster and creates of 1-2.5 KiB values 15-45% faster, and puts of
// 256-byte values about 10% slower.
const sqlitePageSize = 16384

// createSQLite gives a database at path (uri, as a file: URI) that does
// not exist yet its page size and incremental auto_vacuum, which neither
// can change once the schema exists in WAL mode. Existing databases keep
// theirs (a `sqlkube datastore migrate` to a new file gives them the new
// ones).
func createSQLite(path, uri string) error {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sqlstore: %w", err)
	}
	// No DSN parameters: go-sqlite3 applies _auto_vacuum at connect, which
	// fixes the page size before it could be set.
	db, err := sql.Open("sqlite3", uri)
	if err != nil {
		return fmt.Errorf("sqlstore: create sqlite: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		fmt.Sprintf("PRAGMA page_size = %d", sqlitePageSize),
		"PRAGMA auto_vacuum = incremental",
		// Writing a schema change makes the file, with the settings above.
		"CREATE TABLE sqlkube_create (x INTEGER)",
		"DROP TABLE sqlkube_create",
	} {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("sqlstore: create sqlite: %s: %w", q, err)
		}
	}
	return nil
}

func openPostgres(ctx context.Context, dsn string) (*conns, error) {
	dsn, err := writablePostgresDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: parse postgres datastore: %w", err)
	}
	if cfg.Database == "" {
		return nil, fmt.Errorf("sqlstore: postgres datastore %s names no database", redact(dsn))
	}
	if err := createPostgresDatabase(ctx, dsn, cfg.Database); err != nil {
		return nil, err
	}
	if dial := cfg.DialFunc; dial != nil {
		cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return buffered(conn), nil
		}
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(16)
	return &conns{
		d:           postgresDialect,
		write:       db,
		read:        db,
		pgDSN:       dsn,
		openMigrate: func() (*sql.DB, error) { return sql.Open("pgx", dsn) },
		describe:    redact(dsn),
	}, nil
}

// createPostgresDatabase creates the named database through the server's
// maintenance database when it does not exist yet.
func createPostgresDatabase(ctx context.Context, dsn, name string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return fmt.Errorf("sqlstore: parse postgres datastore: %w", err)
	}
	u.Path = "/postgres"
	admin, err := pgx.Connect(ctx, u.String())
	if err != nil {
		// Without the maintenance database we cannot create; the database
		// itself may still exist and be reachable.
		conn, cerr := pgx.Connect(ctx, dsn)
		if cerr != nil {
			return fmt.Errorf("sqlstore: connect to postgres %s: %w", redact(dsn), cerr)
		}
		return conn.Close(ctx)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("sqlstore: look up postgres database: %w", err)
	}
	if exists {
		return waitPostgresDatabase(ctx, dsn)
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		var again bool
		if qerr := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&again); qerr == nil && again {
			return waitPostgresDatabase(ctx, dsn) // another instance created it first
		}
		return fmt.Errorf("sqlstore: create postgres database %q: %w", name, err)
	}
	return waitPostgresDatabase(ctx, dsn)
}

// waitPostgresDatabase waits until a database just created can be
// connected to through dsn. With several hosts, a standby named before
// the primary may not have replayed the CREATE DATABASE yet (a
// synchronous standby acknowledges a commit once it has the WAL, before
// it applies it), and pgx tries no further host after one that says the
// database does not exist.
func waitPostgresDatabase(ctx context.Context, dsn string) error {
	const bound = 30 * time.Second
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			return conn.Close(ctx)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
			return fmt.Errorf("sqlstore: connect to postgres %s: %w", redact(dsn), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sqlstore: connect to postgres %s: the database was created, but a host named before the primary still lacks it after %v: %w", redact(dsn), bound, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func openMySQL(ctx context.Context, dsn string) (*conns, error) {
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		return nil, fmt.Errorf("sqlstore: parse mysql datastore: %w", err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("sqlstore: mysql datastore %s names no database", redact(dsn))
	}
	if err := createMySQLDatabase(ctx, cfg.Clone()); err != nil {
		return nil, err
	}
	cfg.ParseTime = false
	cfg.MultiStatements = false
	// Report rows matched, not rows changed, as the other databases do: an
	// UPDATE that rewrites a row with equal values (two lease keepalives in
	// one millisecond) still found it.
	cfg.ClientFoundRows = true
	// Send each statement with its arguments in one round trip: without
	// this the driver prepares, executes and closes a statement for every
	// query that has arguments, three messages where one does. Byte
	// strings go as escaped _binary literals, which is safe in utf8mb4
	// (the driver's default) and utf8, not in multibyte character sets
	// whose characters may end in a quote or backslash byte (gbk, sjis,
	// big5): a DSN that names another charset keeps prepared statements.
	cfg.InterpolateParams = interpolationSafe(dsn)
	switch cfg.Net {
	case "tcp", "tcp4", "tcp6", "unix":
		cfg.DialFunc = dialBuffered
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open mysql: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(16)
	mcfg := cfg.Clone()
	mcfg.MultiStatements = true
	return &conns{
		d:           mysqlDialect,
		write:       db,
		read:        db,
		openMigrate: func() (*sql.DB, error) { return sql.Open("mysql", mcfg.FormatDSN()) },
		describe:    redact(dsn),
		database:    cfg.DBName,
	}, nil
}

// interpolationSafe reports whether a MySQL DSN leaves the connection's
// character set at utf8mb4 or utf8.
func interpolationSafe(dsn string) bool {
	// Parameters follow the database name, after the last '/' (a
	// password may hold a '?').
	rest := dsn[strings.LastIndexByte(dsn, '/')+1:]
	i := strings.IndexByte(rest, '?')
	if i < 0 {
		return true
	}
	q, err := url.ParseQuery(rest[i+1:])
	if err != nil {
		return false
	}
	for _, cs := range strings.Split(q.Get("charset"), ",") {
		switch strings.ToLower(strings.TrimSpace(cs)) {
		case "", "utf8mb4", "utf8", "utf8mb3":
		default:
			return false
		}
	}
	return true
}

func createMySQLDatabase(ctx context.Context, cfg *mysql.Config) error {
	name := cfg.DBName
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("sqlstore: open mysql: %w", err)
	}
	defer admin.Close()
	quoted := "`" + strings.ReplaceAll(name, "`", "``") + "`"
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quoted+" CHARACTER SET utf8mb4"); err != nil {
		var merr *mysql.MySQLError
		if errors.As(err, &merr) && (merr.Number == 1044 || merr.Number == 1227) {
			return nil // no right to create; the database may exist already
		}
		return fmt.Errorf("sqlstore: create mysql database %q: %w", name, err)
	}
	return nil
}

// redact hides a password in a DSN for logs and errors.
func redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			cred := rest[:at]
			if c := strings.IndexByte(cred, ':'); c >= 0 {
				return dsn[:i+3] + cred[:c] + ":xxxxx" + rest[at:]
			}
		}
	}
	return dsn
}

// Migrate applies the schema to the datastore at dsn and returns its version.
func Migrate(ctx context.Context, dsn string) (uint, error) {
	c, err := openConns(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer c.close()
	return migrateUp(c)
}

func migrateUp(c *conns) (uint, error) {
	db, err := c.openMigrate()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: open for migration: %w", err)
	}
	if err := migrations.Up(db, c.d.name); err != nil {
		return 0, err
	}
	return migrations.Latest(c.d.name)
}

// MigrateDown reverts the whole schema of the datastore at dsn.
func MigrateDown(ctx context.Context, dsn string) error {
	c, err := openConns(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.close()
	db, err := c.openMigrate()
	if err != nil {
		return fmt.Errorf("sqlstore: open for migration: %w", err)
	}
	return migrations.Down(db, c.d.name)
}

// SchemaVersion reports the datastore's schema version and whether it is dirty.
func SchemaVersion(ctx context.Context, dsn string) (uint, bool, error) {
	c, err := openConns(ctx, dsn)
	if err != nil {
		return 0, false, err
	}
	defer c.close()
	db, err := c.openMigrate()
	if err != nil {
		return 0, false, fmt.Errorf("sqlstore: open for migration: %w", err)
	}
	return migrations.Version(db, c.d.name)
}
