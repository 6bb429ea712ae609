package e2e

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver
	_ "github.com/mattn/go-sqlite3"    // "sqlite3" driver

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/migrations"
)

// openDatastore opens the database behind a sqlkube DSN with database/sql,
// to look at or tamper with it behind sqlkube's back. It is closed when the
// test ends.
func openDatastore(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	switch {
	case strings.HasPrefix(dsn, "sqlite://"):
		db, err = sql.Open("sqlite3", "file:"+strings.TrimPrefix(dsn, "sqlite://")+"?_busy_timeout=10000")
	case strings.HasPrefix(dsn, "postgres://"):
		db, err = sql.Open("pgx", dsn)
	case strings.HasPrefix(dsn, "mysql://"):
		var cfg *mysql.Config
		if cfg, err = mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://")); err == nil {
			db, err = sql.Open("mysql", cfg.FormatDSN())
		}
	default:
		t.Fatalf("openDatastore: unknown DSN %q", dsn)
	}
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// schemaTables are the tables of migration 1 in every dialect.
var schemaTables = []string{"kv_meta", "kv_current", "kv_log", "leases"}

func TestSqlkube_Migrate(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		dsn := b.NewDSN(t)
		ds := "--datastore=" + dsn
		d, err := sqlstore.Dialect(dsn)
		if err != nil {
			t.Fatal(err)
		}
		latest, err := migrations.Latest(d)
		if err != nil {
			t.Fatal(err)
		}
		want := func(what, got, want string) {
			t.Helper()
			if got != want {
				t.Errorf("%s printed %q, want %q", what, got, want)
			}
		}
		versionLine := func(v uint) string {
			return fmt.Sprintf("version %d (dirty false); this binary knows up to %d\n", v, latest)
		}
		upLine := fmt.Sprintf("schema at version %d\n", latest)

		want("migrate version on a new database", sqlkubeOK(t, "migrate", "version", ds), versionLine(0))
		want("migrate up", sqlkubeOK(t, "migrate", "up", ds), upLine)
		want("migrate version after up", sqlkubeOK(t, "migrate", "version", ds), versionLine(latest))
		want("migrate up again", sqlkubeOK(t, "migrate", "up", ds), upLine)

		// The migrated schema serves; write something down will take away.
		s := startServer(t, dsn)
		fresh := s.revision(t)
		putAll(t, s, "mig/a", "1")
		s.stop(t)

		want("migrate down", sqlkubeOK(t, "migrate", "down", ds), "schema removed\n")
		db := openDatastore(t, dsn)
		for _, table := range schemaTables {
			if _, err := db.Exec("SELECT 1 FROM " + table); err == nil {
				t.Errorf("table %s still there after migrate down", table)
			}
		}
		want("migrate version after down", sqlkubeOK(t, "migrate", "version", ds), versionLine(0))
		want("migrate up after down", sqlkubeOK(t, "migrate", "up", ds), upLine)
		s = startServer(t, dsn)
		wantOutput(t, "get after down and up", s.ctl(t, "get", "mig/a"))
		if rev := s.revision(t); rev != fresh {
			t.Errorf("revision after down and up %d, want %d as on a new database", rev, fresh)
		}
		s.stop(t)

		// A newer sqlkube migrated this database: this one must not touch it.
		if _, err := db.Exec("UPDATE schema_migrations SET version = 999"); err != nil {
			t.Fatalf("set schema version 999: %v", err)
		}
		want("migrate version of a newer schema", sqlkubeOK(t, "migrate", "version", ds), versionLine(999))
		newer := []string{"schema is newer", "999"}
		wantStartError(t, []string{"etcd", "--listen-address=127.0.0.1:0", ds}, newer...)
		wantStartError(t, []string{"migrate", "up", ds}, newer...)
		wantStartError(t, []string{"migrate", "down", ds}, newer...)
		want("migrate version after the refusals", sqlkubeOK(t, "migrate", "version", ds), versionLine(999))
		for _, table := range schemaTables {
			if _, err := db.Exec("SELECT 1 FROM " + table); err != nil {
				t.Errorf("table %s of the newer schema: %v", table, err)
			}
		}

		// A migration that failed half-way leaves the schema dirty.
		if _, err := db.Exec(fmt.Sprintf("UPDATE schema_migrations SET version = %d, dirty = true", latest)); err != nil {
			t.Fatalf("mark the schema dirty: %v", err)
		}
		want("migrate version of a dirty schema", sqlkubeOK(t, "migrate", "version", ds),
			fmt.Sprintf("version %d (dirty true); this binary knows up to %d\n", latest, latest))
		wantStartError(t, []string{"etcd", "--listen-address=127.0.0.1:0", ds}, "dirty")
		wantStartError(t, []string{"migrate", "up", ds}, "dirty")
	})
}
