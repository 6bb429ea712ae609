package datastore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sqlkube/sqlkube/datastore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestCopy_DumpMeta attaches meta to a dump (as a tenant backup attaches
// its tenant's token) and reads it back from the header, and the dump
// restores as any other.
func TestCopy_DumpMeta(t *testing.T) {
	ctx := testCtx(t)
	dsn := backend(sqltest.SQLite).NewDSN(t)
	s := openStore(t, dsn)
	want := fill(t, s, 50)
	file := filepath.Join(t.TempDir(), "b.sqlkube.gz")
	src, err := datastore.OpenSource(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := datastore.OpenSink(ctx, file, false)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"sqlkube.io/tenant-token": "secret", "sqlkube.io/tenant": "a"}
	res, err := datastore.CopyVerified(ctx, src, dst, func(ctx context.Context) (datastore.Source, error) {
		return datastore.OpenSource(ctx, file)
	}, false, datastore.Options{Meta: meta})
	if err != nil {
		t.Fatalf("CopyVerified: %v", err)
	}
	h, err := datastore.ReadHeader(ctx, file)
	if err != nil {
		t.Fatal(err)
	}
	if h.Revision != res.Source.Revision || h.Kind != "dump" {
		t.Errorf("header: revision %d, kind %s; want %d, dump", h.Revision, h.Kind, res.Source.Revision)
	}
	for k, v := range meta {
		if h.Meta[k] != v {
			t.Errorf("meta %s = %q, want %q", k, h.Meta[k], v)
		}
	}
	to := backend(sqltest.SQLite).NewDSN(t)
	if _, err := datastore.Migrate(ctx, file, to, false, datastore.Options{}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	checkKeys(t, to, want)
}
