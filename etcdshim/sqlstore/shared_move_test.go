package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// TestShared_ExportImportBetweenDatabases moves a tenant's tables from
// one database to another of the same server, as the host moves a
// tenant: read in one snapshot as the tenant (Shared.OpenExport), loaded
// as the tenant (Shared.OpenImport), the same keys and revision after;
// then the first database's place is dropped while the role, the
// server's, stays for the second, until that one is dropped too.
func TestShared_ExportImportBetweenDatabases(t *testing.T) {
	dsn1, dsn2 := postgresDSN(t), postgresDSN(t)
	h1 := newShared(t, dsn1, sqlstore.SharedOptions{MaxConns: 3})
	h2 := newShared(t, dsn2, sqlstore.SharedOptions{MaxConns: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tn := provisioned(t, h1, "mv")
	t.Cleanup(func() { _ = h2.Drop(context.Background(), tn) }) // before h1's: the role goes last

	if _, err := h2.OpenExport(ctx, tn); !errors.Is(err, sqlstore.ErrNoDatastore) {
		t.Fatalf("OpenExport of a tenant never provisioned there: %v, want ErrNoDatastore", err)
	}

	s1, err := sqlstore.Open(ctx, sqlstore.Options{Shared: h1, Tenant: tn, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s1, "/a", "1")
	put(t, s1, "/b", "2")
	put(t, s1, "/a", "3")
	del(t, s1, "/b", "")
	want := get(t, s1, "/a")
	rev := currentRev(t, s1)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	e, err := h1.OpenExport(ctx, tn)
	if err != nil {
		t.Fatalf("OpenExport: %v", err)
	}
	if e.Revision != rev || e.NumKeys != 1 || e.NumLogRows != 4 {
		t.Errorf("export at revision %d with %d keys and %d log rows, want %d, 1 and 4", e.Revision, e.NumKeys, e.NumLogRows, rev)
	}
	if err := h2.Provision(ctx, tn); err != nil {
		t.Fatal(err)
	}
	im, err := h2.OpenImport(ctx, tn, false)
	if err != nil {
		t.Fatalf("OpenImport: %v", err)
	}
	if err := e.Leases(ctx, 100, func(ls []sqlstore.LeaseRow) error { return im.Leases(ctx, ls) }); err != nil {
		t.Fatal(err)
	}
	if err := e.Current(ctx, 100, func(kvs []sqlstore.KeyValue) error { return im.Current(ctx, kvs) }); err != nil {
		t.Fatal(err)
	}
	if err := e.Log(ctx, 100, func(rows []sqlstore.LogRow) error { return im.Log(ctx, rows) }); err != nil {
		t.Fatal(err)
	}
	if err := im.Commit(ctx, e.Revision, e.CompactRevision); err != nil {
		t.Fatal(err)
	}
	im.Close()
	e.Close()
	// A second load is refused: the place holds data now.
	if im, err := h2.OpenImport(ctx, tn, false); !errors.Is(err, sqlstore.ErrNotEmpty) {
		if err == nil {
			im.Close()
		}
		t.Errorf("OpenImport into a loaded tenant: %v, want ErrNotEmpty", err)
	}

	// The first database's place goes; the role stays for the second.
	if err := h1.Drop(ctx, tn); err != nil {
		t.Fatalf("Drop in the first database: %v", err)
	}
	if role, schema := exists(t, adminConn(t, dsn1), tn); !role || schema {
		t.Errorf("after the first database's Drop: role exists %v (want true: the second uses it), schema exists %v", role, schema)
	}
	s2, err := sqlstore.Open(ctx, sqlstore.Options{Shared: h2, Tenant: tn, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	checkKV(t, "/a in the second database", get(t, s2, "/a"), want)
	if got := get(t, s2, "/b"); got != nil {
		t.Errorf("/b, deleted, is back: %s", kvString(got))
	}
	checkRev(t, s2, rev)
	if got := put(t, s2, "/c", "4"); got != rev+1 {
		t.Errorf("the first write after the move got revision %d, want %d", got, rev+1)
	}
	if got := getAt(t, s2, "/b", rev-1); got == nil || string(got.Value) != "2" {
		t.Errorf("/b at revision %d (history): %v, want 2", rev-1, got)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h2.Drop(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if role, schema := exists(t, adminConn(t, dsn2), tn); role || schema {
		t.Errorf("after the second Drop: role exists %v, schema exists %v", role, schema)
	}
}
