package datastore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sqlkube/sqlkube/datastore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestBackup_Online backs up a datastore while writers run, and checks the
// backup is the datastore at one revision (the source read back at the
// backup's revision holds exactly its keys), then restores it into every
// backend and checks keys, revisions and history.
func TestBackup_Online(t *testing.T) {
	for _, tc := range []struct {
		name, from string
		dump       bool
	}{
		{"sqlite-vacuum", sqltest.SQLite, false},
		{"sqlite-dump", sqltest.SQLite, true},
		{"postgres-dump", sqltest.Postgres, true},
		{"mysql-dump", sqltest.MySQL, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dsn := backend(tc.from).NewDSN(t)
			s := openStore(t, dsn)
			want := fill(t, s, 300)

			// Writers keep going during the backup.
			wctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; wctx.Err() == nil; i++ {
						key := fmt.Sprintf("/registry/leases/kube-node-lease/node-%d-%d", w, i%20)
						_, _, _ = s.Put(wctx, sqlstore.PutRequest{Key: []byte(key), Value: []byte(fmt.Sprint(i))})
					}
				}()
			}
			file := filepath.Join(t.TempDir(), "backup")
			res, err := datastore.Backup(ctx, dsn, file, tc.dump, false, datastore.Options{})
			stop()
			wg.Wait()
			if err != nil {
				t.Fatalf("Backup: %v", err)
			}
			if _, err := datastore.Backup(ctx, dsn, file, tc.dump, false, datastore.Options{}); err == nil {
				t.Errorf("a second Backup over the file succeeded without --force")
			}
			rev := res.Source.Revision
			t.Logf("backup at revision %d; fill ended at %d", rev, want.revision)
			if rev < want.revision {
				t.Fatalf("backup at revision %d, below %d", rev, want.revision)
			}
			// The source at the backup's revision is what the backup holds.
			at, err := s.Range(ctx, sqlstore.RangeRequest{Key: []byte{0}, End: []byte{0}, Revision: rev})
			if err != nil {
				t.Fatal(err)
			}
			snap := &cluster{keys: map[string]entry{}, leases: want.leases, revision: rev,
				oldKey: want.oldKey, oldValue: want.oldValue, oldRev: want.oldRev, compact: want.compact}
			for _, kv := range at.KVs {
				snap.keys[string(kv.Key)] = entry{kv.Value, kv.Lease}
			}
			if int64(len(snap.keys)) != res.Keys {
				t.Errorf("backup holds %d keys; the source held %d at its revision %d", res.Keys, len(snap.keys), rev)
			}
			checkKeys(t, file, snap)

			for _, b := range sqltest.Backends() {
				t.Run("restore-"+b.Name, func(t *testing.T) {
					to := b.NewDSN(t)
					if _, err := datastore.Migrate(ctx, file, to, false, datastore.Options{}); err != nil {
						t.Fatalf("restore: %v", err)
					}
					h := checkKeys(t, to, snap)
					if h.Revision != rev || h.CompactRevision != want.compact {
						t.Errorf("restored at revision %d (compacted %d), want %d (%d)", h.Revision, h.CompactRevision, rev, want.compact)
					}
					checkHistory(t, to, snap)
					if got := writeAfter(t, to); got != rev+1 {
						t.Errorf("a write after the restore got revision %d, want %d", got, rev+1)
					}
				})
			}
		})
	}
}

// TestDump_Truncated: a dump cut short is refused, never half restored.
func TestDump_Truncated(t *testing.T) {
	ctx := testCtx(t)
	dsn := backend(sqltest.SQLite).NewDSN(t)
	s := openStore(t, dsn)
	fill(t, s, 100)
	file := filepath.Join(t.TempDir(), "backup.sqlkube.gz")
	if _, err := datastore.Backup(ctx, dsn, file, true, false, datastore.Options{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.sqlkube.gz")
	if err := os.WriteFile(cut, data[:len(data)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	to := backend(sqltest.SQLite).NewDSN(t)
	if _, err := datastore.Migrate(ctx, cut, to, false, datastore.Options{}); err == nil {
		t.Fatal("restoring a truncated dump succeeded")
	}
	// Nothing was committed: the target is still empty, so a good restore
	// needs no --force.
	if _, err := datastore.Migrate(ctx, file, to, false, datastore.Options{}); err != nil {
		t.Fatalf("restore after a failed one: %v", err)
	}
	head, err := os.ReadFile(file)
	if err != nil || !bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
		t.Errorf("the dump is not gzip")
	}
}
