package sqlstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// benchStores opens a store on its own database (the one-store-per-DSN
// path) and one on a shared pool, on the same server.
func benchStores(b *testing.B) map[string]*sqlstore.Store {
	ctx := context.Background()
	plain, err := sqlstore.Open(ctx, sqlstore.Options{DSN: postgresDSN(b), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { plain.Close() })
	h := newShared(b, postgresDSN(b), sqlstore.SharedOptions{})
	shared, err := sqlstore.Open(ctx, sqlstore.Options{Shared: h, Tenant: provisioned(b, h, "bench"), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { shared.Close() })
	return map[string]*sqlstore.Store{"dsn": plain, "shared": shared}
}

// BenchmarkShared_Get reads one key, one caller at a time: a statement
// outside a transaction, which a shared store wraps in one.
func BenchmarkShared_Get(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"dsn", "shared", "shared-unpipelined"} {
		b.Run(name, func(b *testing.B) {
			if name == "shared-unpipelined" {
				defer sqlstore.SetPipelineAutoCommit(sqlstore.SetPipelineAutoCommit(false))
				name = "shared"
			}
			s := benchStores(b)[name]
			if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("/k"), Value: make([]byte, 256)}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("/k")}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkShared_Put writes one key, one caller at a time: the writer's
// transaction, whose SET LOCALs travel with its BEGIN.
func BenchmarkShared_Put(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"dsn", "shared"} {
		b.Run(name, func(b *testing.B) {
			s := benchStores(b)[name]
			val := make([]byte, 256)
			for b.Loop() {
				if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("/k"), Value: val}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkShared_Begin is an empty transaction on one connection: BEGIN
// alone, BEGIN with the SET LOCALs in its message, and the SET LOCALs as
// statements of their own.
func BenchmarkShared_Begin(b *testing.B) {
	ctx := context.Background()
	dsn := postgresDSN(b)
	h := newShared(b, dsn, sqlstore.SharedOptions{MaxConns: 2})
	tn := provisioned(b, h, "begin")
	conn := adminConn(b, dsn)
	set := "SET LOCAL ROLE " + tn.Role + "; SET LOCAL search_path TO " + tn.Schema
	for _, c := range []struct {
		name  string
		stmts []string
	}{
		{"begin", []string{"BEGIN", "COMMIT"}},
		{"begin+set-one-message", []string{"BEGIN; " + set, "COMMIT"}},
		{"begin+set-three-messages", []string{"BEGIN", "SET LOCAL ROLE " + tn.Role, "SET LOCAL search_path TO " + tn.Schema, "COMMIT"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				for _, q := range c.stmts {
					if _, err := conn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
