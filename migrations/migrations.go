// Package migrations holds the versioned SQL schema of sqlkube's revision log,
// one folder per dialect, embedded in the binary and applied with
// golang-migrate.
package migrations

import (
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite3"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed sqlite/*.sql postgres/*.sql mysql/*.sql
var files embed.FS

// Dialect names a folder of migrations.
type Dialect string

// The dialects sqlkube ships a schema for.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
)

// ErrSchemaTooNew is returned when the database was migrated by a newer
// sqlkube than this binary.
var ErrSchemaTooNew = errors.New("migrations: database schema is newer than this binary supports")

// Latest returns the highest migration version this binary knows for d.
func Latest(d Dialect) (uint, error) {
	entries, err := fs.ReadDir(files, string(d))
	if err != nil {
		return 0, fmt.Errorf("migrations: unknown dialect %q: %w", d, err)
	}
	var versions []uint64
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(prefix, 10, 32)
		if err != nil {
			continue
		}
		versions = append(versions, v)
	}
	if len(versions) == 0 {
		return 0, fmt.Errorf("migrations: no migrations for dialect %q", d)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	return uint(versions[len(versions)-1]), nil
}

// newMigrate builds a migrate instance over db, and returns its database
// driver too. Closing the returned instance closes db, so callers hand it
// a connection pool of its own.
func newMigrate(db *sql.DB, d Dialect) (*migrate.Migrate, database.Driver, error) {
	src, err := iofs.New(files, string(d))
	if err != nil {
		return nil, nil, fmt.Errorf("migrations: source: %w", err)
	}
	var drv database.Driver
	switch d {
	case SQLite:
		drv, err = migratesqlite.WithInstance(db, &migratesqlite.Config{})
	case Postgres:
		drv, err = migratepgx.WithInstance(db, &migratepgx.Config{})
	case MySQL:
		drv, err = migratemysql.WithInstance(db, &migratemysql.Config{})
	default:
		return nil, nil, fmt.Errorf("migrations: unknown dialect %q", d)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("migrations: driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, string(d), drv)
	if err != nil {
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	return m, drv, nil
}

// Version reports the schema version of the database behind db (0 when no
// migration has run) and whether a migration failed half-way. It closes db.
func Version(db *sql.DB, d Dialect) (version uint, dirty bool, err error) {
	m, _, err := newMigrate(db, d)
	if err != nil {
		return 0, false, err
	}
	defer m.Close()
	v, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrations: version: %w", err)
	}
	return v, dirty, nil
}

// Up applies every migration newer than the database's version. It refuses a
// database whose version is newer than Latest with ErrSchemaTooNew, and one
// left dirty by a failed migration. It closes db.
func Up(db *sql.DB, d Dialect) error {
	return run(db, d, "up", (*migrate.Migrate).Up)
}

// Down reverts every migration, leaving an empty database. It closes db.
func Down(db *sql.DB, d Dialect) error {
	return run(db, d, "down", (*migrate.Migrate).Down)
}

// run checks the database's version, then applies step.
func run(db *sql.DB, d Dialect, name string, step func(*migrate.Migrate) error) error {
	m, drv, err := newMigrate(db, d)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkVersion(m, drv, d); err != nil {
		return err
	}
	if err := step(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrations: %s: %w", name, err)
	}
	return nil
}

// checkVersion refuses a database newer than this binary or left dirty. It
// reads the version holding migrate's lock (an advisory lock on
// PostgreSQL, GET_LOCK on MySQL), which a migration holds while it runs:
// a version marked dirty there is one a migration left half-way, not one
// another server is migrating now (two servers starting on a new
// database). The lock is released before step takes it again.
func checkVersion(m *migrate.Migrate, drv database.Driver, d Dialect) error {
	latest, err := Latest(d)
	if err != nil {
		return err
	}
	if err := drv.Lock(); err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	v, dirty, err := m.Version()
	if uerr := drv.Unlock(); uerr != nil && err == nil {
		return fmt.Errorf("migrations: unlock: %w", uerr)
	}
	if errors.Is(err, migrate.ErrNilVersion) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrations: version: %w", err)
	}
	if v > latest {
		return fmt.Errorf("%w: database is at version %d, this binary knows up to %d; upgrade sqlkube", ErrSchemaTooNew, v, latest)
	}
	if dirty {
		return fmt.Errorf("migrations: database is dirty at version %d (a migration failed half-way); repair it, then run 'sqlkube migrate' again", v)
	}
	return nil
}
