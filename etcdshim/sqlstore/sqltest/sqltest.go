// Package sqltest gives tests a fresh, empty database on every backend:
// SQLite in a temporary directory, and a new database on the PostgreSQL and
// MySQL servers of the machine, dropped when the test ends.
//
// PostgreSQL and MySQL are found at SQLKUBE_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) and
// SQLKUBE_TEST_MYSQL (default mysql://root@tcp(127.0.0.1:3306)/). When one
// cannot be reached the tests for it are skipped with a line that says so,
// except under CI=true, where that is a failure.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver
)

// Backend is one database to run a test against.
type Backend struct {
	Name string // sqlite, postgres, mysql
	// NewDSN returns the DSN of a new, empty database that is removed when
	// the test ends.
	NewDSN func(t testing.TB) string
}

// Names of the backends.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// PostgresAdminDSN and MySQLAdminDSN locate the test servers.
func PostgresAdminDSN() string {
	return env("SQLKUBE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
}

// MySQLAdminDSN locates the MySQL test server.
func MySQLAdminDSN() string {
	return env("SQLKUBE_TEST_MYSQL", "mysql://root@tcp(127.0.0.1:3306)/")
}

func inCI() bool { return os.Getenv("CI") == "true" }

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sqlkube_test_" + hex.EncodeToString(b[:])
}

var (
	reachOnce  sync.Map // backend name -> *reach
	sqliteBack = Backend{Name: SQLite, NewDSN: func(t testing.TB) string {
		t.Helper()
		return "sqlite://" + filepath.Join(t.TempDir(), "state.db")
	}}
)

type reach struct {
	once sync.Once
	err  error
}

func reachable(name string, ping func() error) error {
	v, _ := reachOnce.LoadOrStore(name, &reach{})
	r := v.(*reach)
	r.once.Do(func() { r.err = ping() })
	return r.err
}

// require skips (or, in CI, fails) a test whose server cannot be reached.
func require(t testing.TB, name string, ping func() error) {
	t.Helper()
	if err := reachable(name, ping); err != nil {
		if inCI() {
			t.Fatalf("%s test server unreachable in CI: %v", name, err)
		}
		t.Skipf("skipping %s tests: no server reachable (%v); set SQLKUBE_TEST_%s to point at one", name, err, strings.ToUpper(name))
	}
}

func pingPostgres() error {
	db, err := sql.Open("pgx", PostgresAdminDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

func mysqlConfig() (*mysql.Config, error) {
	return mysql.ParseDSN(strings.TrimPrefix(MySQLAdminDSN(), "mysql://"))
}

func pingMySQL() error {
	cfg, err := mysqlConfig()
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

var postgresBack = Backend{Name: Postgres, NewDSN: func(t testing.TB) string {
	t.Helper()
	require(t, Postgres, pingPostgres)
	u, err := url.Parse(PostgresAdminDSN())
	if err != nil {
		t.Fatalf("parse SQLKUBE_TEST_POSTGRES: %v", err)
	}
	name := randomName()
	u.Path = "/" + name
	t.Cleanup(func() {
		db, err := sql.Open("pgx", PostgresAdminDSN())
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec(fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name))
	})
	return u.String()
}}

var mysqlBack = Backend{Name: MySQL, NewDSN: func(t testing.TB) string {
	t.Helper()
	require(t, MySQL, pingMySQL)
	cfg, err := mysqlConfig()
	if err != nil {
		t.Fatalf("parse SQLKUBE_TEST_MYSQL: %v", err)
	}
	name := randomName()
	cfg.DBName = name
	t.Cleanup(func() {
		admin, err := mysqlConfig()
		if err != nil {
			return
		}
		db, err := sql.Open("mysql", admin.FormatDSN())
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	})
	return "mysql://" + cfg.FormatDSN()
}}

// Backends returns every backend. SQLKUBE_TEST_BACKENDS (a comma-separated
// list) narrows it.
func Backends() []Backend {
	all := []Backend{sqliteBack, postgresBack, mysqlBack}
	only := os.Getenv("SQLKUBE_TEST_BACKENDS")
	if only == "" {
		return all
	}
	var out []Backend
	for _, b := range all {
		for _, n := range strings.Split(only, ",") {
			if strings.TrimSpace(n) == b.Name {
				out = append(out, b)
			}
		}
	}
	return out
}

// Run runs fn as a subtest per backend.
func Run(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b) })
	}
}
