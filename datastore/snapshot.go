package datastore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"google.golang.org/protobuf/proto"
)

// boltMagic is at byte 16 of a bbolt file (the first meta page's magic,
// little-endian 0xED0CDAED).
var boltMagic = []byte{0xed, 0xda, 0x0c, 0xed}

// isEtcdSnapshot reports whether head (a file's first bytes) starts a bbolt
// database, which is what `etcdctl snapshot save` writes.
func isEtcdSnapshot(head []byte) bool {
	return len(head) >= 20 && bytes.Equal(head[16:20], boltMagic)
}

// snapshotSource reads an etcd snapshot (`etcdctl snapshot save`, or an
// etcd member's member/snap/db): the key bucket holds every revision since
// the last compaction, keyed by revision, and the lease bucket the leases.
// It yields the state at the newest revision and that history, which is
// the revision log sqlkube keeps (etcd compacts as sqlkube does: the
// newest version of each key at or below the compaction stays). Leases get
// the time they had left when the snapshot was taken if etcd checkpointed
// it, else their whole TTL from now, which is what etcd does when it
// restores one.
type snapshotSource struct {
	path  string
	db    *bolt.DB
	close func()
	h     Header
	kvs   []KeyValue
	ls    []LeaseRow
}

var _ Source = (*snapshotSource)(nil)

func openSnapshotSource(path string) (*snapshotSource, error) {
	db, cleanup, err := openSnapshotDB(path)
	if err != nil {
		return nil, err
	}
	s := &snapshotSource{path: path, db: db, close: cleanup}
	if err := db.View(s.load); err != nil {
		cleanup()
		return nil, fmt.Errorf("datastore: etcd snapshot %s: %w", path, err)
	}
	return s, nil
}

// openSnapshotDB opens the bbolt file read-only. A file from `etcdctl
// snapshot save` ends with the SHA-256 of what precedes it; that is checked
// and the database copied without it.
func openSnapshotDB(path string) (*bolt.DB, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("datastore: open etcd snapshot: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	dbPath, cleanup := path, func() {}
	if st.Size()%512 == sha256.Size {
		tmp, err := os.MkdirTemp("", "sqlkube-snapshot-")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { os.RemoveAll(tmp) }
		dbPath = filepath.Join(tmp, "db")
		out, err := os.Create(dbPath)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		h := sha256.New()
		_, err = io.Copy(io.MultiWriter(out, h), io.LimitReader(f, st.Size()-sha256.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		var want [sha256.Size]byte
		if err == nil {
			_, err = io.ReadFull(f, want[:])
		}
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("datastore: read etcd snapshot: %w", err)
		}
		if !bytes.Equal(h.Sum(nil), want[:]) {
			cleanup()
			return nil, nil, fmt.Errorf("datastore: etcd snapshot %s: SHA-256 does not match its trailer (corrupt or truncated)", path)
		}
	}
	db, err := bolt.Open(dbPath, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("datastore: open etcd snapshot %s: %w", path, err)
	}
	return db, func() { db.Close(); cleanup() }, nil
}

// revKey parses a key bucket key as etcd's mvcc package writes it
// (storage/mvcc/revision.go): the main revision as 8 bytes big-endian,
// '_', the sub revision as 8 bytes, and a trailing 't' on a tombstone.
// (Parsed here rather than with that package, which would link etcd's
// raft and auth into sqlkube for 10 lines.)
func revKey(k []byte) (main, sub int64, tombstone, ok bool) {
	if (len(k) != 17 && len(k) != 18) || k[8] != '_' || k[0]&0x80 != 0 || k[9]&0x80 != 0 {
		return 0, 0, false, false
	}
	return int64(binary.BigEndian.Uint64(k)), int64(binary.BigEndian.Uint64(k[9:])), len(k) == 18 && k[17] == 't', true
}

func (s *snapshotSource) load(tx *bolt.Tx) error {
	kb := tx.Bucket([]byte("key"))
	if kb == nil {
		return fmt.Errorf("no key bucket: not an etcd v3 database")
	}
	live := map[string]KeyValue{}
	var rev, entries int64 = 1, 0
	err := kb.ForEach(func(k, v []byte) error {
		entries++
		main, _, tombstone, ok := revKey(k)
		if !ok {
			return fmt.Errorf("malformed revision key %x", k)
		}
		rev = max(rev, main)
		var kv mvccpb.KeyValue
		if err := proto.Unmarshal(v, &kv); err != nil {
			return fmt.Errorf("revision %d: %w", main, err)
		}
		if tombstone {
			delete(live, string(kv.Key))
			return nil
		}
		live[string(kv.Key)] = fromEtcd(&kv)
		return nil
	})
	if err != nil {
		return err
	}
	var compacted int64
	if mb := tx.Bucket([]byte("meta")); mb != nil {
		if v := mb.Get([]byte("finishedCompactRev")); len(v) >= 8 {
			compacted = int64(binary.BigEndian.Uint64(v))
		}
	}
	// A compaction may have removed the newest revision's tombstones.
	rev = max(rev, compacted)
	s.kvs = make([]KeyValue, 0, len(live))
	for _, kv := range live {
		s.kvs = append(s.kvs, kv)
	}
	sort.Slice(s.kvs, func(i, j int) bool { return bytes.Compare(s.kvs[i].Key, s.kvs[j].Key) < 0 })
	now := time.Now().UnixMilli()
	if lb := tx.Bucket([]byte("lease")); lb != nil {
		err := lb.ForEach(func(_, v []byte) error {
			var l leasepb.Lease
			if err := proto.Unmarshal(v, &l); err != nil {
				return fmt.Errorf("lease: %w", err)
			}
			left := l.TTL
			if l.RemainingTTL > 0 {
				left = l.RemainingTTL
			}
			s.ls = append(s.ls, LeaseRow{ID: l.ID, TTL: l.TTL, ExpiresAt: now + left*1000})
			return nil
		})
		if err != nil {
			return err
		}
	}
	s.h = Header{Revision: rev, CompactRevision: compacted, History: true, Keys: int64(len(s.kvs)), Leases: int64(len(s.ls)),
		LogRows: entries, Kind: "etcd-snapshot"}
	return nil
}

func (s *snapshotSource) Header() Header { return s.h }

func (s *snapshotSource) Leases(_ context.Context, fn func([]LeaseRow) error) error {
	return inBatches(s.ls, fn)
}

func (s *snapshotSource) Current(_ context.Context, fn func([]KeyValue) error) error {
	return inBatches(s.kvs, fn)
}

// History reads the key bucket again, in revision order, as log rows: sub
// revisions count from 1 as sqlkube's do, and each row names the
// revision of its key's previous row (0 after a delete, as sqlkube logs a
// key created again).
func (s *snapshotSource) History(_ context.Context, fn func([]LogRow) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		prev := map[string]int64{}
		out := make([]LogRow, 0, batchSize)
		err := tx.Bucket([]byte("key")).ForEach(func(k, v []byte) error {
			main, sub, tombstone, _ := revKey(k)
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("revision %d: %w", main, err)
			}
			r := LogRow{Revision: main, Sub: sub + 1, Key: kv.Key, Deleted: tombstone, PrevRevision: prev[string(kv.Key)]}
			if tombstone {
				delete(prev, string(kv.Key))
			} else {
				r.CreateRevision, r.Version, r.Lease, r.Value = kv.CreateRevision, kv.Version, kv.Lease, kv.Value
				prev[string(kv.Key)] = main
			}
			if out = append(out, r); len(out) == batchSize {
				if err := fn(out); err != nil {
					return err
				}
				out = make([]LogRow, 0, batchSize)
			}
			return nil
		})
		if err == nil && len(out) > 0 {
			err = fn(out)
		}
		return err
	})
}

func (s *snapshotSource) Describe() string { return "etcd snapshot " + s.path }

func (s *snapshotSource) Close() error {
	s.close()
	return nil
}

func inBatches[T any](all []T, fn func([]T) error) error {
	for len(all) > 0 {
		n := min(len(all), batchSize)
		if err := fn(all[:n]); err != nil {
			return err
		}
		all = all[n:]
	}
	return nil
}
