package sqlstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/internal/testfs"
)

// gauge reads a gauge of reg (-1 if it has none of that name).
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// reserveSize is the size of the reserve file of s (-1: none).
func reserveSize(t *testing.T, s *sqlstore.Store) int64 {
	t.Helper()
	st, err := os.Stat(s.ReservePath())
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestStore_DiskFull fills the small file system under a SQLite store
// far below its quota: the put that finds no space fails with
// ErrDiskFull and so does every request that could grow the store after
// it, while the reserve is given back; reads, deletes, lease keepalives
// and compaction still succeed; once compaction has given space back the
// store makes its reserve again and takes writes by itself; nothing
// acknowledged is lost, before or after a restart.
func TestStore_DiskFull(t *testing.T) {
	// The reserve must hold what a checkpoint of a full WAL (16 MiB)
	// may add to the database file; the file system, the reserve, a WAL
	// and some data.
	const (
		fsSize  = 96 << 20
		reserve = 24 << 20
		value   = 256 << 10
	)
	dir := testfs.Tmpfs(t, fsSize)
	dsn := "sqlite://" + filepath.Join(dir, "state.db")
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, ReserveBytes: reserve, QuotaBytes: 1 << 30, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = s.Close()
		}
	})
	if got := reserveSize(t, s); got != reserve {
		t.Fatalf("reserve file of %d bytes, want %d", got, reserve)
	}
	if full, _ := s.DiskFull(); full || gauge(t, reg, "sqlkube_store_disk_full") != 0 || gauge(t, reg, "sqlkube_store_disk_reserve_bytes") != reserve {
		t.Fatalf("a new store: DiskFull %v, disk_full %v, disk_reserve_bytes %v", full, gauge(t, reg, "sqlkube_store_disk_full"), gauge(t, reg, "sqlkube_store_disk_reserve_bytes"))
	}
	lease, err := s.LeaseGrant(ctx, 0, 600)
	if err != nil {
		t.Fatal(err)
	}

	// Fill the file system.
	start := time.Now()
	var acked []string
	var refusal error
	for i := 0; i < 2*fsSize/value; i++ {
		key := fmt.Sprintf("fill/%04d", i)
		val := make([]byte, value)
		_, _ = rand.Read(val) // incompressible
		if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte(key), Value: val}); err != nil {
			refusal = err
			break
		}
		acked = append(acked, key)
	}
	if !errors.Is(refusal, sqlstore.ErrDiskFull) {
		t.Fatalf("after %d puts of %d bytes on a %d-byte file system: %v, want ErrDiskFull", len(acked), value, fsSize, refusal)
	}
	t.Logf("%d puts of %d KiB acknowledged in %v, then: %v", len(acked), value>>10, time.Since(start).Round(time.Millisecond), refusal)
	full, since := s.DiskFull()
	if !full || since.IsZero() || s.CheckDiskSpace(ctx) == nil {
		t.Fatalf("after the refusal: DiskFull %v %v, CheckDiskSpace %v", full, since, s.CheckDiskSpace(ctx))
	}
	if got := reserveSize(t, s); got != -1 {
		t.Errorf("reserve file of %d bytes while the disk is full, want it given back", got)
	}
	if g, r := gauge(t, reg, "sqlkube_store_disk_full"), gauge(t, reg, "sqlkube_store_disk_reserve_bytes"); g != 1 || r != 0 {
		t.Errorf("while full: disk_full %v, disk_reserve_bytes %v; want 1, 0", g, r)
	}

	// Whatever could grow the store is refused, small or not.
	if _, _, err := s.Put(ctx, sqlstore.PutRequest{Key: []byte("small"), Value: []byte("x")}); !errors.Is(err, sqlstore.ErrDiskFull) {
		t.Errorf("small put while full: %v, want ErrDiskFull", err)
	}
	if _, err := s.Txn(ctx, txnPut("fill/0000", "x")); !errors.Is(err, sqlstore.ErrDiskFull) {
		t.Errorf("txn with a put while full: %v, want ErrDiskFull", err)
	}
	if _, err := s.LeaseGrant(ctx, 0, 60); !errors.Is(err, sqlstore.ErrDiskFull) {
		t.Errorf("lease grant while full: %v, want ErrDiskFull", err)
	}
	// Reads are served; deletes, keepalives and compaction succeed.
	if kv := get(t, s, acked[0]); kv == nil || len(kv.Value) != value {
		t.Fatalf("get %s while full: %v", acked[0], kv)
	}
	if _, err := s.LeaseKeepAlive(ctx, lease.ID); err != nil {
		t.Errorf("lease keepalive while full: %v", err)
	}
	keep := len(acked) / 8
	for _, key := range acked[keep:] {
		if _, _, err := s.DeleteRange(ctx, sqlstore.DeleteRequest{Key: []byte(key)}); err != nil {
			t.Fatalf("delete %s while full: %v", key, err)
		}
	}
	if _, err := s.Txn(ctx, &sqlstore.TxnRequest{Success: []sqlstore.Op{{Delete: &sqlstore.DeleteRequest{Key: []byte(acked[0])}}}}); err != nil {
		t.Fatalf("txn that deletes while full: %v", err)
	}
	acked = acked[1:keep]
	rev := currentRev(t, s)
	if _, err := s.Compact(ctx, rev); err != nil {
		t.Fatalf("compact while full: %v", err)
	}
	// Compaction gave the space back: the store takes writes again by
	// itself, with its reserve.
	start = time.Now()
	eventually(t, "writes resume after deletes and compaction", func() (bool, error) {
		full, _ := s.DiskFull()
		return !full, nil
	})
	t.Logf("writes resumed %v after the compaction (%d MiB free)", time.Since(start).Round(time.Millisecond), testfs.Free(t, dir)>>20)
	if got := reserveSize(t, s); got != reserve {
		t.Errorf("reserve file of %d bytes after the disk had space again, want %d", got, reserve)
	}
	if g, r := gauge(t, reg, "sqlkube_store_disk_full"), gauge(t, reg, "sqlkube_store_disk_reserve_bytes"); g != 0 || r != reserve {
		t.Errorf("after: disk_full %v, disk_reserve_bytes %v; want 0, %d", g, r, reserve)
	}
	put(t, s, "after", "again")
	if _, err := s.LeaseGrant(ctx, 0, 60); err != nil {
		t.Errorf("lease grant after: %v", err)
	}
	checkKeys := func(s *sqlstore.Store) {
		t.Helper()
		for _, key := range acked {
			if kv := get(t, s, key); kv == nil || len(kv.Value) != value {
				t.Fatalf("acknowledged put of %s lost", key)
			}
		}
		if kv := get(t, s, "after"); kv == nil || string(kv.Value) != "again" {
			t.Fatalf("the put after the disk had space again is lost: %v", kv)
		}
	}
	checkKeys(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	checkKeys(openWith(t, sqlstore.Options{DSN: dsn, ReserveBytes: reserve}))
}

// TestStore_DiskFullAtOpen: a store whose reserve does not fit on its
// disk opens in the disk-full state (it serves reads, refuses what could
// grow it) and takes writes, with its reserve, once the operator frees
// space; a store without a reserve removes a leftover one.
func TestStore_DiskFullAtOpen(t *testing.T) {
	const reserve = 4 << 20
	dir := testfs.Tmpfs(t, 32<<20)
	dsn := "sqlite://" + filepath.Join(dir, "state.db")
	s := openWith(t, sqlstore.Options{DSN: dsn, ReserveBytes: reserve})
	put(t, s, "before", "full")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.ReservePath()); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	testfs.Fill(t, filler, reserve/2)

	s = openWith(t, sqlstore.Options{DSN: dsn, ReserveBytes: reserve})
	if full, _ := s.DiskFull(); !full {
		t.Fatalf("a store whose reserve did not fit is not in the disk-full state (%d bytes free)", testfs.Free(t, dir))
	}
	if kv := get(t, s, "before"); kv == nil || string(kv.Value) != "full" {
		t.Fatalf("read while full: %v", kv)
	}
	if _, _, err := s.Put(context.Background(), sqlstore.PutRequest{Key: []byte("k"), Value: []byte("v")}); !errors.Is(err, sqlstore.ErrDiskFull) {
		t.Fatalf("put while full: %v, want ErrDiskFull", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, "writes resume once the operator freed space", func() (bool, error) {
		full, _ := s.DiskFull()
		return !full, nil
	})
	if got := reserveSize(t, s); got != reserve {
		t.Errorf("reserve file of %d bytes once there was space, want %d", got, reserve)
	}
	put(t, s, "k", "v")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openWith(t, sqlstore.Options{DSN: dsn, ReserveBytes: -1})
	if _, err := os.Stat(filepath.Join(dir, "state.db-reserve")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a store without a reserve left the old one: %v", err)
	}
	if got := s.ReservePath(); got != "" {
		t.Errorf("ReservePath() of a store without a reserve: %q", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The default reserve is a 16th of a file system under 1 GiB.
	s = openWith(t, sqlstore.Options{DSN: dsn})
	if got := reserveSize(t, s); got != 2<<20 {
		t.Errorf("default reserve on a 32 MiB file system: %d bytes, want 2 MiB", got)
	}
}
