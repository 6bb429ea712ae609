package sqlstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

func sqlitePragmas(t *testing.T, path string) (pageSize, autoVacuum int, journal string) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for q, dst := range map[string]any{"PRAGMA page_size": &pageSize, "PRAGMA auto_vacuum": &autoVacuum, "PRAGMA journal_mode": &journal} {
		if err := db.QueryRow(q).Scan(dst); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return pageSize, autoVacuum, journal
}

// A new SQLite database gets 16 KiB pages (rows of Kubernetes objects stay
// in their pages), incremental auto-vacuum and WAL; one that exists keeps
// its page size and its data.
func TestOpen_SQLitePageSize(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, "sqlite://"+path)
	if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ps, av, j := sqlitePragmas(t, path); ps != 16384 || av != 2 || j != "wal" {
		t.Errorf("new database: page_size %d, auto_vacuum %d, journal_mode %s; want 16384, 2 (incremental), wal", ps, av, j)
	}

	// A database made by an earlier version, at SQLite's default 4 KiB.
	old := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite3", "file:"+old+"?_auto_vacuum=incremental&_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = open(t, "sqlite://"+old)
	if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ps, _, _ := sqlitePragmas(t, old); ps != 4096 {
		t.Errorf("existing database: page_size %d, want its own 4096", ps)
	}
	s = open(t, "sqlite://"+old)
	if got, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte("k")}); err != nil || len(got.KVs) != 1 || string(got.KVs[0].Value) != "v" {
		t.Errorf("reopened existing database: %v %+v", err, got)
	}
}
