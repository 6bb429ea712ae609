// Package teststore gives tests sqlkube's etcd API in-process on a fresh
// SQLite database, torn down when the test ends.
package teststore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	etcdkube "go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/storage"
)

// Server opens dir/state.db and serves the etcd API over it, without a
// listener; clients reach it with storage.Local.
func Server(tb testing.TB, dir string) *etcdshim.Server {
	tb.Helper()
	be, err := sqlstore.Open(context.Background(), sqlstore.Options{DSN: "sqlite://" + filepath.Join(dir, "state.db"), Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = be.Close() })
	srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: zerolog.Nop()})
	tb.Cleanup(func() { srv.Stop(time.Second) })
	return srv
}

// Client returns an in-process client of srv, closed when tb ends.
func Client(tb testing.TB, srv *etcdshim.Server) *etcdkube.Client {
	tb.Helper()
	c := storage.Local(srv)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Local is a client of a new Server on dir/state.db.
func Local(tb testing.TB, dir string) *etcdkube.Client {
	tb.Helper()
	return Client(tb, Server(tb, dir))
}
