package sqltest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// PrivatePostgres is a PostgreSQL server of one test's own (initdb into a
// temporary directory, listening on 127.0.0.1 at a port the OS gave), for
// tests that stop and start the database, or fail it over to a standby
// (NewStandby). It is stopped and removed when the test ends.
type PrivatePostgres struct {
	Port int
	bin  string
	dir  string
	// runAs is the user the server runs as when the test runs as root
	// (initdb refuses root); uid and gid are its.
	runAs    string
	uid, gid int
	// settings are more -c name=value options for every start.
	settings []string
}

// NewPrivatePostgres initdbs and starts a private PostgreSQL. Without
// PostgreSQL's server binaries (/usr/lib/postgresql/*/bin) the test is
// skipped, or fails under CI=true.
func NewPrivatePostgres(t testing.TB) *PrivatePostgres {
	t.Helper()
	p := newPrivateDir(t)
	p.initdb(t)
	p.Start(t)
	return p
}

func (p *PrivatePostgres) initdb(t testing.TB) {
	t.Helper()
	if out, err := p.command(filepath.Join(p.bin, "initdb"), "-D", p.data(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
}

// newPrivateDir finds the server binaries and gives a server its
// directory (owned by the user it runs as) and port. Nothing runs yet;
// the directory is removed, and whatever server runs in it stopped, when
// the test ends.
func newPrivateDir(t testing.TB) *PrivatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		if inCI() {
			t.Fatal("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) not found; CI must provide them")
		}
		t.Skip("skipping: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin for a private PostgreSQL")
	}
	p := &PrivatePostgres{bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "sqlkube-private-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() {
		_ = p.pgctl("stop", "-m", "immediate")
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		p.runAs = "postgres"
		u, err := user.Lookup(p.runAs)
		if err != nil {
			t.Fatalf("running as root, a private PostgreSQL needs the postgres user: %v", err)
		}
		p.uid, _ = strconv.Atoi(u.Uid)
		p.gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, p.uid, p.gid); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return p
}

func (p *PrivatePostgres) data() string { return filepath.Join(p.dir, "data") }

func (p *PrivatePostgres) command(name string, args ...string) *exec.Cmd {
	if p.runAs != "" {
		return exec.Command("runuser", append([]string{"-u", p.runAs, "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func (p *PrivatePostgres) pgctl(args ...string) error {
	args = append([]string{"-D", p.data(), "-w", "-t", "60"}, args...)
	out, err := p.command(filepath.Join(p.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return nil
}

// DSN is a connection string for database db (created by sqlkube when
// missing) on the private server.
func (p *PrivatePostgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// Start starts the server and waits until it accepts connections.
func (p *PrivatePostgres) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", p.Port, p.dir)
	for _, s := range p.settings {
		opts += " -c " + s
	}
	if err := p.pgctl("start", "-l", filepath.Join(p.dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
		t.Fatalf("%v\n%s", err, log)
	}
}

// Stop stops the server: mode "fast" (clients disconnected, a clean
// shutdown) or "immediate" (as a crash: recovery runs at the next start).
func (p *PrivatePostgres) Stop(t testing.TB, mode string) {
	t.Helper()
	start := time.Now()
	if err := p.pgctl("stop", "-m", mode); err != nil {
		t.Fatal(err)
	}
	t.Logf("private PostgreSQL stopped (%s) in %v", mode, time.Since(start))
}

// Log is what the server has written to its log file so far.
func (p *PrivatePostgres) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	return string(b)
}
