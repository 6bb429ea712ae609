package sqlstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// postgresDSN returns a new, empty PostgreSQL database (skipped without a
// server, failed under CI=true).
func postgresDSN(t testing.TB) string {
	t.Helper()
	for _, b := range sqltest.Backends() {
		if b.Name == sqltest.Postgres {
			return b.NewDSN(t)
		}
	}
	t.Skip("SQLKUBE_TEST_BACKENDS leaves out postgres")
	return ""
}

// newShared opens a shared handle on dsn, closed when the test ends.
func newShared(t testing.TB, dsn string, opts sqlstore.SharedOptions) *sqlstore.Shared {
	t.Helper()
	opts.Logger = zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := sqlstore.NewShared(ctx, dsn, opts)
	if err != nil {
		t.Fatalf("NewShared: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// newTenant names a tenant no other test uses; its role and schema are
// dropped when the test ends.
func newTenant(t testing.TB, h *sqlstore.Shared, name string) sqlstore.Tenant {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := "t_" + name + "_" + hex.EncodeToString(b[:])
	tn := sqlstore.Tenant{Schema: n, Role: n}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Drop(ctx, tn); err != nil {
			t.Errorf("Drop(%s): %v", tn.Schema, err)
		}
	})
	return tn
}

// provisioned is newTenant, provisioned.
func provisioned(t testing.TB, h *sqlstore.Shared, name string) sqlstore.Tenant {
	t.Helper()
	tn := newTenant(t, h, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Provision(ctx, tn); err != nil {
		t.Fatalf("Provision(%s): %v", tn.Schema, err)
	}
	return tn
}

func openTenant(t *testing.T, h *sqlstore.Shared, tn sqlstore.Tenant) *sqlstore.Store {
	t.Helper()
	return openWith(t, sqlstore.Options{Shared: h, Tenant: tn})
}

// adminConn connects to dsn as the test server's user, outside any pool.
func adminConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestShared_TenantsSeeOnlyTheirKeys(t *testing.T) {
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2})
	a := openTenant(t, h, provisioned(t, h, "a"))
	b := openTenant(t, h, provisioned(t, h, "b"))
	put(t, a, "/k", "from a")
	put(t, a, "/only-a", "x")
	put(t, b, "/k", "from b")
	all := sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}}
	checkKVs(t, "a's keys", rng(t, a, all).KVs, []sqlstore.KeyValue{kv("/k", "from a", 2, 2, 1, 0), kv("/only-a", "x", 3, 3, 1, 0)})
	checkKVs(t, "b's keys", rng(t, b, all).KVs, []sqlstore.KeyValue{kv("/k", "from b", 2, 2, 1, 0)})
	if got := currentRev(t, b); got != 2 {
		t.Errorf("b's revision = %d, want 2 (a's writes are not b's)", got)
	}
}

func TestShared_PostgresRefusesOtherTenantsTables(t *testing.T) {
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2})
	a := provisioned(t, h, "a")
	b := provisioned(t, h, "b")
	put(t, openTenant(t, h, b), "/secret", "b's")
	conn := adminConn(t, dsn)
	ctx := context.Background()
	for _, c := range []struct{ q, code, msg string }{
		{`SELECT * FROM ` + b.Schema + `.kv_current`, "42501", "permission denied for schema"},
		{`UPDATE ` + b.Schema + `.kv_meta SET val = 0`, "42501", "permission denied for schema"},
		// A schema the role may not use is left out of its search_path.
		{`SET LOCAL search_path TO ` + b.Schema + `; SELECT * FROM kv_current`, "42P01", `relation "kv_current" does not exist`},
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+a.Role); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, c.q)
		_ = tx.Rollback(ctx)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != c.code || !strings.Contains(pe.Message, c.msg) {
			t.Errorf("%s as %s: err = %v, want %s (%s)", c.q, a.Role, err, c.msg, c.code)
		}
	}
	// The store's own statements run as a's role in a's schema, and are
	// refused b's tables: in its transactions, and outside them, pipelined
	// or not.
	sa := openTenant(t, h, a)
	for _, pipelined := range []bool{true, false} {
		old := sqlstore.SetPipelineAutoCommit(pipelined)
		for _, inTx := range []bool{false, true} {
			var role, path string
			if err := sa.QueryRowForTest(ctx, inTx, `SELECT current_user, current_setting('search_path')`, &role, &path); err != nil {
				t.Fatal(err)
			}
			if role != a.Role || path != a.Schema && path != `"`+a.Schema+`"` {
				t.Errorf("pipelined %v, in a transaction %v: the store runs as %q with search_path %q, want %q, %q", pipelined, inTx, role, path, a.Role, a.Schema)
			}
			var n int
			err := sa.QueryRowForTest(ctx, inTx, `SELECT COUNT(*) FROM `+b.Schema+`.kv_current`, &n)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "42501" {
				t.Errorf("pipelined %v, in a transaction %v: a's store reading b's table: %v, want permission denied", pipelined, inTx, err)
			}
		}
		sqlstore.SetPipelineAutoCommit(old)
	}
	// And b's own role may.
	var n int
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+b.Role); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM `+b.Schema+`.kv_current`).Scan(&n); err != nil || n != 1 {
		t.Errorf("b's role reading b's table: %d rows, %v; want 1", n, err)
	}
}

func TestShared_PoolBound(t *testing.T) {
	const (
		tenants  = 20
		maxConns = 5
	)
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: maxConns})
	stores := make([]*sqlstore.Store, tenants)
	for i := range stores {
		stores[i] = openTenant(t, h, provisioned(t, h, fmt.Sprint("p", i)))
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	sampler := adminConn(t, u.String())

	var peak, samples atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var n int64
			if err := sampler.QueryRow(context.Background(), `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n); err == nil {
				samples.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, tenants*4)
	for i, s := range stores {
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 10; k++ {
					key := fmt.Sprintf("/t%d/w%d/k%d", i, w, k)
					if _, _, err := s.Put(context.Background(), sqlstore.PutRequest{Key: []byte(key), Value: []byte("v")}); err != nil {
						errs <- err
						return
					}
					if _, err := s.Range(context.Background(), sqlstore.RangeRequest{Key: []byte(key)}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Errorf("write: %v", err)
	}
	for i, s := range stores {
		if got := rng(t, s, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, CountOnly: true}).Count; got != 40 {
			t.Errorf("tenant %d holds %d keys, want 40", i, got)
		}
	}
	t.Logf("peak %d connections to the test database over %d samples", peak.Load(), samples.Load())
	if p := peak.Load(); p > maxConns {
		t.Errorf("peak %d connections to the test database, want at most %d", p, maxConns)
	}
	if total, _ := h.Stat(); total > maxConns-1 {
		t.Errorf("pool holds %d connections, want at most %d besides LISTEN", total, maxConns-1)
	}
}

// exists reports whether the role and the schema of tn exist.
func exists(t *testing.T, conn *pgx.Conn, tn sqlstore.Tenant) (role, schema bool) {
	t.Helper()
	ctx := context.Background()
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
 EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $2)`, tn.Role, tn.Schema).Scan(&role, &schema); err != nil {
		t.Fatal(err)
	}
	return role, schema
}

func TestShared_ProvisionAndDropResume(t *testing.T) {
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 3})
	conn := adminConn(t, dsn)
	ctx := context.Background()
	for n := 0; n <= sqlstore.ProvisionSteps(); n++ {
		t.Run(fmt.Sprint("provision crashed after ", n, " steps"), func(t *testing.T) {
			tn := newTenant(t, h, "r")
			if err := h.ProvisionUpTo(ctx, tn, n); err != nil {
				t.Fatalf("first %d steps: %v", n, err)
			}
			// Provision finishes it (twice: it is idempotent).
			for i := 0; i < 2; i++ {
				if err := h.Provision(ctx, tn); err != nil {
					t.Fatalf("Provision: %v", err)
				}
			}
			s := openTenant(t, h, tn)
			put(t, s, "/k", "v")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// A drop that crashed at any step is finished by Drop.
			for m := 0; m <= sqlstore.DropSteps(); m++ {
				if err := h.DropUpTo(ctx, tn, m); err != nil {
					t.Fatalf("first %d drop steps: %v", m, err)
				}
				if err := h.Drop(ctx, tn); err != nil {
					t.Fatalf("Drop after %d steps: %v", m, err)
				}
				if role, schema := exists(t, conn, tn); role || schema {
					t.Fatalf("after Drop: role exists %v, schema exists %v", role, schema)
				}
				if err := h.Provision(ctx, tn); err != nil {
					t.Fatalf("Provision after Drop: %v", err)
				}
			}
			// A half-made tenant is removed by Drop too.
			if err := h.Drop(ctx, tn); err != nil {
				t.Fatal(err)
			}
			if err := h.ProvisionUpTo(ctx, tn, n); err != nil {
				t.Fatal(err)
			}
			if err := h.Drop(ctx, tn); err != nil {
				t.Fatalf("Drop of a tenant made %d steps: %v", n, err)
			}
			if role, schema := exists(t, conn, tn); role || schema {
				t.Fatalf("after Drop: role exists %v, schema exists %v", role, schema)
			}
		})
	}
}

func TestShared_RefusesNamesAndForeignRoles(t *testing.T) {
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2})
	ctx := context.Background()
	for _, n := range []string{"", "Upper", "pg_x", "public", "a-b", "a;b", "1a", strings.Repeat("a", 49)} {
		if err := h.Provision(ctx, sqlstore.Tenant{Schema: n, Role: n}); !errors.Is(err, sqlstore.ErrTenantName) {
			t.Errorf("Provision(%q) = %v, want ErrTenantName", n, err)
		}
	}
	// The server's login role is no tenant role.
	if err := h.Provision(ctx, sqlstore.Tenant{Schema: "t_x", Role: "postgres"}); err == nil {
		t.Errorf("Provision with role postgres succeeded")
	}
	if err := h.Drop(ctx, sqlstore.Tenant{Schema: "t_x", Role: "postgres"}); err == nil {
		t.Errorf("Drop with role postgres succeeded")
	}
}

// countingTracer counts the statements a pool sends.
type countingTracer struct {
	mu   sync.Mutex
	n    int
	last []string
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.last = append(c.last, d.SQL)
	if len(c.last) > 20 {
		c.last = c.last[1:]
	}
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) count() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, append([]string(nil), c.last...)
}

func TestShared_IdleRunsNoSQL(t *testing.T) {
	dsn := postgresDSN(t)
	tr := &countingTracer{}
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 3, Tracer: tr})
	s := openWith(t, sqlstore.Options{Shared: h, Tenant: provisioned(t, h, "idle"),
		CompactionInterval: 100 * time.Millisecond, CompactionRetention: 1})
	put(t, s, "/a", "1")
	put(t, s, "/a", "2")
	l := grant(t, s, 0, 60)
	putLeased(t, s, "/leased", "x", l.ID)
	watch(t, s, []byte("/"), prefixEnd([]byte("/")), 0)
	// Let what the writes started (compaction, the lease timer's read
	// after its own notification) finish: no statement for 500 ms.
	var last int
	eventually(t, "the store to settle", func() (bool, error) {
		n, _ := tr.count()
		if n != last {
			last = n
			time.Sleep(500 * time.Millisecond)
			return false, nil
		}
		return true, nil
	})
	txns := h.Transactions()
	if txns == 0 {
		t.Fatal("Transactions() = 0 after the writes")
	}
	const idle = 3 * time.Second
	time.Sleep(idle)
	n, stmts := tr.count()
	if n != last {
		t.Errorf("%d statements in %v of idle, want 0; the last: %q", n-last, idle, stmts)
	}
	if got := h.Transactions(); got != txns {
		t.Errorf("%d transactions in %v of idle, want 0", got-txns, idle)
	}
}

func TestShared_WatchesAndLeasesPerTenant(t *testing.T) {
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 3})
	ta := provisioned(t, h, "a")
	a := openTenant(t, h, ta)
	b := openTenant(t, h, provisioned(t, h, "b"))
	w, r := watch(t, a, []byte("/"), prefixEnd([]byte("/")), 0)
	put(t, b, "/x", "b")
	rev := put(t, a, "/x", "a")
	waitSent(t, w, rev)
	checkStrings(t, "a's watch", evStrings(r.events()), []string{evString(putEv(kv("/x", "a", 2, 2, 1, 0), nil))})

	// A second host on the same tenant (another handle, as another
	// process) follows a's writes and expires a's leases once a is gone.
	h2 := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2})
	a2 := openWith(t, sqlstore.Options{Shared: h2, Tenant: ta})
	w2, r2 := watch(t, a2, []byte("/"), prefixEnd([]byte("/")), 0)
	l := grant(t, a, 0, 1)
	rev = putLeased(t, a, "/leased", "x", l.ID)
	waitSent(t, w2, rev)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lease to expire on the second host", func() (bool, error) {
		return get(t, a2, "/leased") == nil, nil
	})
	if _, err := a2.LeaseTimeToLive(context.Background(), l.ID, false); !errors.Is(err, sqlstore.ErrLeaseNotFound) {
		t.Errorf("LeaseTimeToLive after expiry: %v, want ErrLeaseNotFound", err)
	}
	r2.checkBatches(t)
	if got := get(t, b, "/x"); got == nil || string(got.Value) != "b" {
		t.Errorf("b's /x = %v after a's lease expired", kvString(got))
	}
}

// TestShared_Maintenance runs what does not fit in a transaction (VACUUM
// FULL) and the size queries as the tenant, and leaves the pool's
// connections without the tenant's role or search_path.
func TestShared_Maintenance(t *testing.T) {
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2}) // one pooled connection: every use shares it
	s := openTenant(t, h, provisioned(t, h, "m"))
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		put(t, s, "/k", strings.Repeat("x", 4096))
	}
	rev := currentRev(t, s)
	if _, err := s.Compact(ctx, rev); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if err := s.Defragment(ctx); err != nil {
		t.Fatalf("Defragment: %v", err)
	}
	if size, err := s.Size(ctx); err != nil || size <= 0 {
		t.Errorf("Size() = %d, %v; want the tenant's tables", size, err)
	}
	// The one pooled connection, as the handle's next user finds it.
	var role, path string
	var own bool
	if err := h.QueryRowForTest(ctx, `SELECT current_user, current_user = session_user, current_setting('search_path')`, &role, &own, &path); err != nil {
		t.Fatal(err)
	}
	if !own || strings.Contains(path, "t_m_") {
		t.Errorf("a pooled connection after the tenant's work: role %q, search_path %q", role, path)
	}
}

// TestShared_HostRoleNotSuperuser provisions, serves and drops tenants as
// the host role docs/datastores.md recommends (LOGIN CREATEROLE NOINHERIT,
// CREATE on the database, not superuser), and checks that the host's role
// does not itself hold a tenant's privileges outside SET ROLE.
func TestShared_HostRoleNotSuperuser(t *testing.T) {
	dsn := postgresDSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	admin := adminConn(t, strings.Replace(dsn, "/"+db, "/postgres", 1))
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	host := "h_" + hex.EncodeToString(b[:])
	// The database, made by the admin, before the host's role may use it.
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE ROLE ` + host + ` LOGIN CREATEROLE NOINHERIT`,
		`GRANT CREATE ON DATABASE ` + db + ` TO ` + host,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{`REVOKE ALL ON DATABASE ` + db + ` FROM ` + host, `DROP ROLE IF EXISTS ` + host} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	hu := *u
	hu.User = url.User(host)
	h := newShared(t, hu.String(), sqlstore.SharedOptions{MaxConns: 2})
	a := provisioned(t, h, "a")
	s := openTenant(t, h, a)
	put(t, s, "/k", "v")
	if got := get(t, s, "/k"); got == nil || string(got.Value) != "v" {
		t.Fatalf("get /k = %v", kvString(got))
	}
	// It may fence the tenant and give its rights back (as its role).
	if err := h.Fence(ctx, a); err != nil {
		t.Fatalf("Fence as the host's role: %v", err)
	}
	if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("/k"), Value: []byte("fenced")}); err == nil {
		t.Error("a write to a tenant fenced by the host's role went through")
	}
	if err := h.Unfence(ctx, a); err != nil {
		t.Fatalf("Unfence as the host's role: %v", err)
	}
	put(t, s, "/k", "v")
	// The host's own session may not read the tenant's table.
	hc := adminConn(t, hu.String())
	var n int
	err = hc.QueryRow(ctx, `SELECT COUNT(*) FROM `+a.Schema+`.kv_current`).Scan(&n)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("the host's role reading a tenant's table without SET ROLE: %v, want permission denied", err)
	}
	hc.Close(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Drop(ctx, a); err != nil {
		t.Fatalf("Drop as the host's role: %v", err)
	}
	if role, schema := exists(t, adminConn(t, dsn), a); role || schema {
		t.Errorf("after Drop: role exists %v, schema exists %v", role, schema)
	}
}

// TestShared_ListenLost: while the handle's LISTEN connection is gone,
// stores poll, so a commit from another host still reaches their watches;
// LISTEN comes back by itself.
func TestShared_ListenLost(t *testing.T) {
	dsn := postgresDSN(t)
	h1 := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2})
	tn := provisioned(t, h1, "l")
	s1 := openTenant(t, h1, tn)
	s2 := openTenant(t, newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2}), tn)
	w, r := watch(t, s1, []byte("/"), prefixEnd([]byte("/")), 0)
	admin := adminConn(t, dsn)
	ctx := context.Background()
	kill := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND query = 'LISTEN sqlkube_tenant' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, "both handles to listen", func() (bool, error) {
		var n int
		err := admin.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN sqlkube_tenant'`).Scan(&n)
		return n == 2, err
	})
	if n := kill(); n != 2 {
		t.Fatalf("terminated %d LISTEN connections, want 2", n)
	}
	rev := put(t, s2, "/after-kill", "x")
	waitSent(t, w, rev)
	checkStrings(t, "watched", evStrings(r.events()), []string{evString(putEv(kv("/after-kill", "x", 2, 2, 1, 0), nil))})
	eventually(t, "LISTEN to be back", func() (bool, error) {
		var n int
		err := admin.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN sqlkube_tenant'`).Scan(&n)
		return n == 2, err
	})
}

// TestShared_ManyTenantsIdle opens SQLKUBE_TEST_TENANTS tenants (10 unless
// set; issue 42 asks for 100) on one handle of 25 connections, each with a
// write, a leased key and a watch, and checks that together they run no
// statement in 3 s of idle.
func TestShared_ManyTenantsIdle(t *testing.T) {
	n := 10
	if v := os.Getenv("SQLKUBE_TEST_TENANTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SQLKUBE_TEST_TENANTS=%q: want a positive number", v)
		}
	}
	dsn := postgresDSN(t)
	tr := &countingTracer{}
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: sqlstore.DefaultSharedMaxConns, Tracer: tr})
	start := time.Now()
	tenants := make([]sqlstore.Tenant, n)
	for i := range tenants {
		tenants[i] = provisioned(t, h, fmt.Sprint("m", i))
	}
	provisioning := time.Since(start)
	start = time.Now()
	for _, tn := range tenants {
		s := openWith(t, sqlstore.Options{Shared: h, Tenant: tn, CompactionInterval: time.Second})
		put(t, s, "/a", "1")
		l := grant(t, s, 0, 60)
		putLeased(t, s, "/leased", "x", l.ID)
		watch(t, s, []byte("/"), prefixEnd([]byte("/")), 0)
	}
	opening := time.Since(start)
	// Settled: no statement for longer than the compaction interval (an
	// automatic compaction reads the revisions once after the last
	// write).
	var last int
	eventually(t, "the stores to settle", func() (bool, error) {
		c, _ := tr.count()
		if c != last {
			last = c
			time.Sleep(1500 * time.Millisecond)
			return false, nil
		}
		return true, nil
	})
	const idle = 3 * time.Second
	time.Sleep(idle)
	c, stmts := tr.count()
	total, _ := h.Stat()
	t.Logf("%d tenants: provisioned in %v, opened and written in %v; %d statements in %v of idle; %d pooled connections (+1 LISTEN)",
		n, provisioning.Round(time.Millisecond), opening.Round(time.Millisecond), c-last, idle, total)
	if c != last {
		t.Errorf("%d statements in %v of idle, want 0; the last: %q", c-last, idle, stmts)
	}
	if total > sqlstore.DefaultSharedMaxConns-1 {
		t.Errorf("%d pooled connections, want at most %d", total, sqlstore.DefaultSharedMaxConns-1)
	}
}

// TestShared_Fence: a fenced tenant's stores, this host's and another
// host's on the same database, are refused writes by PostgreSQL
// (permission denied) but still read; unfenced, they write again.
func TestShared_Fence(t *testing.T) {
	dsn := postgresDSN(t)
	h := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2})
	other := newShared(t, dsn, sqlstore.SharedOptions{MaxConns: 2}) // another host's
	tn := provisioned(t, h, "fence")
	a, b := openTenant(t, h, tn), openTenant(t, other, tn)
	put(t, a, "/k", "before")
	ctx := context.Background()
	if err := h.Fence(ctx, tn); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	for name, s := range map[string]*sqlstore.Store{"this host's": a, "another host's": b} {
		_, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("/k"), Value: []byte("after")})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s store's write to a fenced tenant: %v, want permission denied", name, err)
		}
		if got := get(t, s, "/k"); got == nil || string(got.Value) != "before" {
			t.Errorf("%s store reads /k = %s from a fenced tenant, want before", name, kvString(got))
		}
	}
	if err := h.Unfence(ctx, tn); err != nil {
		t.Fatalf("Unfence: %v", err)
	}
	put(t, b, "/k", "unfenced")
	if got := get(t, a, "/k"); got == nil || string(got.Value) != "unfenced" {
		t.Errorf("after Unfence: /k = %s, want unfenced", kvString(got))
	}
}
