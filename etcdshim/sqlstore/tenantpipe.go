package sqlstore

import (
	"context"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// setTenant sets the tenant's role and search_path for the transaction,
// one statement text for every tenant (args: role, quoted schema).
const setTenant = `SELECT set_config('role', $1, true), set_config('search_path', $2, true)`

// byteaOID is PostgreSQL's bytea type.
const byteaOID = 17

// pipeline sends a statement that has no transaction of its own as BEGIN,
// the tenant's settings, the statement and COMMIT, in one round trip: one
// pipeline with one Sync. The statement is parsed after the settings ran,
// so its names resolve in the tenant's schema; its parameters go in text
// format with their types inferred by the server (pgx's
// QueryExecModeExec), its results come back in text format. It returns the
// reader positioned on the statement's result.
func (c *tenantConn) pipeline(ctx context.Context, query string, args []driver.NamedValue) (*pgconn.MultiResultReader, error) {
	pc := c.Conn.Conn()
	if pc.IsClosed() {
		return nil, driver.ErrBadConn
	}
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(pc.TypeMap(), nil, vals); err != nil {
		return nil, err
	}
	c.txns.Add(1)
	if tr := pc.Config().Tracer; tr != nil {
		// A pgconn batch bypasses pgx's tracing: the handle's Tracer
		// sees the statement here, when it is sent.
		tr.TraceQueryEnd(tr.TraceQueryStart(ctx, pc, pgx.TraceQueryStartData{SQL: query, Args: vals}), pc, pgx.TraceQueryEndData{})
	}
	b := &pgconn.Batch{}
	b.ExecParams("BEGIN", nil, nil, nil, nil)
	b.ExecParams(setTenant, [][]byte{[]byte(c.role), []byte(c.path)}, nil, nil, nil)
	b.ExecParams(query, eqb.ParamValues, nil, eqb.ParamFormats, nil)
	b.ExecParams("COMMIT", nil, nil, nil, nil)
	mrr := pc.PgConn().ExecBatch(ctx, b)
	c.inTx = true // until the COMMIT is read
	for i := 0; i < 2; i++ {
		if err := nextResult(mrr); err != nil {
			return nil, c.endPipeline(ctx, mrr, err)
		}
		if _, err := mrr.ResultReader().Close(); err != nil {
			return nil, c.endPipeline(ctx, mrr, err)
		}
	}
	if err := nextResult(mrr); err != nil {
		return nil, c.endPipeline(ctx, mrr, err)
	}
	return mrr, nil
}

// nextResult moves to the pipeline's next result; a statement that failed
// before it had a result (a Parse error) is an error here.
func nextResult(mrr *pgconn.MultiResultReader) error {
	if mrr.NextResult() {
		return nil
	}
	if err := mrr.Close(); err != nil {
		return err
	}
	return errors.New("sqlstore: pipeline ended early")
}

// endPipeline reads the COMMIT's result and the rest of the pipeline after
// the statement's result was read (err is its error, if any). Whatever
// failed, the transaction is ended before the connection is given back.
func (c *tenantConn) endPipeline(ctx context.Context, mrr *pgconn.MultiResultReader, err error) error {
	if err == nil {
		err = nextResult(mrr)
	}
	if err == nil {
		tag, cerr := mrr.ResultReader().Close()
		switch {
		case cerr != nil:
			err = cerr
		case tag.String() == "ROLLBACK":
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := mrr.Close(); err == nil {
		err = cerr
	}
	c.rollback(ctx) // nothing to do unless something failed
	if err != nil && pgconn.SafeToRetry(err) {
		return driver.ErrBadConn
	}
	return err
}

func (c *tenantConn) execPipelined(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	mrr, err := c.pipeline(ctx, query, args)
	if err != nil {
		return nil, err
	}
	tag, err := mrr.ResultReader().Close()
	if err := c.endPipeline(ctx, mrr, err); err != nil {
		return nil, err
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

func (c *tenantConn) queryPipelined(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	mrr, err := c.pipeline(ctx, query, args)
	if err != nil {
		return nil, err
	}
	rr := mrr.ResultReader()
	r := &pipeRows{c: c, ctx: ctx, mrr: mrr, rr: rr}
	for _, f := range rr.FieldDescriptions() {
		r.cols = append(r.cols, f.Name)
		r.oids = append(r.oids, f.DataTypeOID)
	}
	return r, nil
}

// pipeRows are the text-format rows of a pipelined statement: bytea comes
// as bytes, NULL as nil, every other value as its text, which database/sql
// converts to the destination's type.
type pipeRows struct {
	c    *tenantConn
	ctx  context.Context
	mrr  *pgconn.MultiResultReader
	rr   *pgconn.ResultReader
	cols []string
	oids []uint32
	done bool
	err  error
}

func (r *pipeRows) Columns() []string { return r.cols }

func (r *pipeRows) Next(dest []driver.Value) error {
	if !r.rr.NextRow() {
		return io.EOF
	}
	for i, v := range r.rr.Values() {
		switch {
		case v == nil:
			dest[i] = nil
		case r.oids[i] == byteaOID:
			b, err := decodeByteaText(v)
			if err != nil {
				return err
			}
			dest[i] = b
		default:
			dest[i] = v
		}
	}
	return nil
}

func (r *pipeRows) Close() error {
	if r.done {
		return r.err
	}
	r.done = true
	_, err := r.rr.Close()
	r.err = r.c.endPipeline(r.ctx, r.mrr, err)
	return r.err
}

// decodeByteaText decodes bytea's text output in hex format (PostgreSQL's
// default since 9.0).
func decodeByteaText(v []byte) ([]byte, error) {
	if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
		return nil, fmt.Errorf("sqlstore: bytea not in hex format (bytea_output)")
	}
	b := make([]byte, hex.DecodedLen(len(v)-2))
	if _, err := hex.Decode(b, v[2:]); err != nil {
		return nil, fmt.Errorf("sqlstore: bytea: %w", err)
	}
	return b, nil
}
