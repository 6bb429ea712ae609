package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Tenant names a tenant's place on a Shared database: the schema that
// holds its tables and the role that owns them, whose privileges its
// statements run with. Both are lower-case SQL identifiers of at most 48
// characters (letters, digits, '_', not starting with a digit or "pg_");
// they may be equal.
type Tenant struct {
	Schema string
	Role   string
}

var tenantName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// ErrTenantName is returned for a schema or role name a Tenant may not
// have.
var ErrTenantName = errors.New("sqlstore: invalid tenant schema or role name")

func (t Tenant) validate() error {
	for _, n := range []string{t.Schema, t.Role} {
		if !tenantName.MatchString(n) || strings.HasPrefix(n, "pg_") {
			return fmt.Errorf("%w: %q (want [a-z_][a-z0-9_]*, at most 48 characters, not pg_…)", ErrTenantName, n)
		}
		switch n {
		case "public", "information_schema", "postgres":
			return fmt.Errorf("%w: %q is reserved", ErrTenantName, n)
		}
	}
	return nil
}

// txPrefix is what follows BEGIN in every transaction of the tenant: one
// simple-protocol message, so it costs no round trip of its own.
func (t Tenant) txPrefix() string {
	return "; SET LOCAL ROLE " + pgx.Identifier{t.Role}.Sanitize() +
		"; SET LOCAL search_path TO " + pgx.Identifier{t.Schema}.Sanitize()
}

// sessionSet sets the tenant's role and search_path for the session, for
// the statements that cannot run in a transaction (see noTx).
func (t Tenant) sessionSet() string {
	return "SET ROLE " + pgx.Identifier{t.Role}.Sanitize() +
		"; SET search_path TO " + pgx.Identifier{t.Schema}.Sanitize()
}

// noTx reports whether a statement cannot run inside a transaction block
// (VACUUM, which Defragment runs).
func noTx(query string) bool {
	q := strings.TrimSpace(query)
	return len(q) >= 6 && strings.EqualFold(q[:6], "VACUUM")
}

// pipelineAutoCommit sends a statement outside a transaction in one
// pipeline with its BEGIN, settings and COMMIT (see tenantConn.pipeline);
// false sends BEGIN and the settings, then the statement, then COMMIT
// (three round trips, the statement prepared and cached). Benchmarks
// compare the two.
var pipelineAutoCommit = true

// tenantConnector hands database/sql connections borrowed from a Shared
// pool; closing one gives it back. Connections never keep a tenant's role
// or search_path outside a transaction: both are SET LOCAL.
type tenantConnector struct {
	h *Shared
	t Tenant
}

func (c *tenantConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := stdlib.GetPoolConnector(c.h.pool).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tenantConn{Conn: dc.(*stdlib.Conn), txns: &c.h.txns, prefix: c.t.txPrefix(), session: c.t.sessionSet(),
		role: c.t.Role, path: pgx.Identifier{c.t.Schema}.Sanitize()}, nil
}

func (c *tenantConnector) Driver() driver.Driver { return stdlib.GetDefaultDriver() }

// tenantConn runs every statement in a transaction begun as its tenant:
// BeginTx sends BEGIN with the tenant's SET LOCALs in one message, and a
// statement outside a transaction gets one of its own around it. database/sql
// uses a driver connection from one goroutine at a time.
type tenantConn struct {
	*stdlib.Conn
	txns            *atomic.Int64 // Shared.txns
	prefix, session string
	// role and path are the values setTenant gives role and search_path.
	role, path string
	inTx       bool
}

// beginSQL is the BEGIN of opts.
func beginSQL(opts driver.TxOptions) (string, error) {
	q := "BEGIN"
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadCommitted:
		q += " ISOLATION LEVEL READ COMMITTED"
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		q += " ISOLATION LEVEL REPEATABLE READ"
	case sql.LevelSerializable:
		q += " ISOLATION LEVEL SERIALIZABLE"
	default:
		return "", fmt.Errorf("sqlstore: unsupported isolation level %v", sql.IsolationLevel(opts.Isolation))
	}
	if opts.ReadOnly {
		q += " READ ONLY"
	}
	return q, nil
}

// begin opens a transaction as the tenant. On failure nothing is left open.
func (c *tenantConn) begin(ctx context.Context, opts driver.TxOptions) error {
	if c.inTx {
		return errors.New("sqlstore: transaction already open")
	}
	if c.Conn.Conn().IsClosed() {
		return driver.ErrBadConn
	}
	q, err := beginSQL(opts)
	if err != nil {
		return err
	}
	c.txns.Add(1)
	if _, err := c.Conn.Conn().Exec(ctx, q+c.prefix); err != nil {
		if pgconn.SafeToRetry(err) {
			return driver.ErrBadConn
		}
		c.rollback(ctx)
		return err
	}
	c.inTx = true
	return nil
}

// end sends COMMIT or ROLLBACK. A COMMIT the server answers ROLLBACK (the
// transaction had failed) is an error.
func (c *tenantConn) end(ctx context.Context, commit bool) error {
	c.inTx = false
	if !commit {
		c.rollback(ctx)
		return nil
	}
	tag, err := c.Conn.Conn().Exec(ctx, "COMMIT")
	if err != nil {
		c.rollback(ctx)
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// rollback ends whatever transaction the connection is in, even when ctx
// was cancelled. If it cannot, the pool drops the connection on release
// (it never pools one that is in a transaction).
func (c *tenantConn) rollback(ctx context.Context) {
	c.inTx = false
	pc := c.Conn.Conn()
	if pc.IsClosed() || pc.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = pc.Exec(ctx, "ROLLBACK")
}

func (c *tenantConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.begin(ctx, opts); err != nil {
		return nil, err
	}
	return &tenantTx{c: c, ctx: ctx}, nil
}

func (c *tenantConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// asSession runs fn with the tenant's role and search_path set for the
// session, and resets both after it. A connection whose reset fails is
// closed, so the pool never hands it out again.
func (c *tenantConn) asSession(ctx context.Context, fn func() error) error {
	pc := c.Conn.Conn()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := pc.Exec(rctx, "RESET ROLE; RESET search_path"); err != nil {
			_ = pc.Close(rctx)
		}
	}()
	c.txns.Add(1)
	if _, err := pc.Exec(ctx, c.session); err != nil {
		return err
	}
	return fn()
}

func (c *tenantConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.inTx {
		return c.Conn.ExecContext(ctx, query, args)
	}
	if noTx(query) {
		var res driver.Result
		err := c.asSession(ctx, func() (err error) {
			res, err = c.Conn.ExecContext(ctx, query, args)
			return err
		})
		return res, err
	}
	if len(args) > 0 && pipelineAutoCommit {
		return c.execPipelined(ctx, query, args)
	}
	// Without arguments a statement may be several (a migration): the
	// simple protocol takes them, a pipeline's Parse would not.
	if err := c.begin(ctx, driver.TxOptions{}); err != nil {
		return nil, err
	}
	res, err := c.Conn.ExecContext(ctx, query, args)
	if err != nil {
		c.rollback(ctx)
		return nil, err
	}
	if err := c.end(ctx, true); err != nil {
		return nil, err
	}
	return res, nil
}

func (c *tenantConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.inTx {
		return c.Conn.QueryContext(ctx, query, args)
	}
	if noTx(query) {
		// Such statements return no rows: run them to the end here.
		err := c.asSession(ctx, func() error {
			_, err := c.Conn.ExecContext(ctx, query, args)
			return err
		})
		if err != nil {
			return nil, err
		}
		return noRows{}, nil
	}
	if pipelineAutoCommit {
		return c.queryPipelined(ctx, query, args)
	}
	if err := c.begin(ctx, driver.TxOptions{}); err != nil {
		return nil, err
	}
	rows, err := c.Conn.QueryContext(ctx, query, args)
	if err != nil {
		c.rollback(ctx)
		return nil, err
	}
	return &tenantRows{Rows: rows.(*stdlib.Rows), c: c, ctx: ctx}, nil
}

// tenantRows are the rows of a statement that had a transaction of its
// own, begun before it was sent, which ends when they are closed.
type tenantRows struct {
	*stdlib.Rows
	c    *tenantConn
	ctx  context.Context
	done bool
}

func (r *tenantRows) Close() error {
	if r.done {
		return nil
	}
	r.done = true
	err := r.Rows.Close()
	if err != nil {
		r.c.rollback(r.ctx)
		return err
	}
	return r.c.end(r.ctx, true)
}

// Prepared statements would run outside the tenant's transactions.
func (c *tenantConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("sqlstore: prepared statements are not used on a shared pool")
}

func (c *tenantConn) PrepareContext(context.Context, string) (driver.Stmt, error) {
	return c.Prepare("")
}

// tenantTx is a transaction begun by tenantConn.BeginTx.
type tenantTx struct {
	c   *tenantConn
	ctx context.Context
}

func (tx *tenantTx) Commit() error   { return tx.c.end(tx.ctx, true) }
func (tx *tenantTx) Rollback() error { return tx.c.end(tx.ctx, false) }

// noRows are the rows of a statement that returns none.
type noRows struct{}

func (noRows) Columns() []string         { return nil }
func (noRows) Close() error              { return nil }
func (noRows) Next([]driver.Value) error { return io.EOF }
