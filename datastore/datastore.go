// Package datastore moves a cluster's data between datastores: SQLite,
// PostgreSQL and MySQL (sqlkube's revision log, table for table), an etcd
// endpoint, an etcd snapshot file, and sqlkube's portable dump file. It
// backs `sqlkube datastore migrate|backup|restore`.
//
// Every datastore is read as a Source (a consistent copy at one revision)
// and written as a Sink. What survives a move depends on both ends:
//
//   - SQL to SQL, and through a dump file: everything, table for table:
//     the revision log (history back to the last compaction), every key
//     with its create/mod revisions and version, leases with their expiry,
//     the current and the compacted revision.
//   - from an etcd snapshot: the current state and the history etcd kept
//     since its last compaction, with etcd's revisions and compaction.
//   - from an etcd endpoint: the current state only, each key with its
//     revisions and version; on a SQL target the store is compacted at the
//     source's revision (older revisions were not copied) and the next
//     write gets the revision after it.
//   - to an etcd endpoint: keys, values and leases; etcd assigns its own
//     revisions, so the target's revision is first advanced with throwaway
//     writes to the source's, and the keys are then written above it (new
//     create/mod revisions, version 1): every revision and resourceVersion
//     ends up higher than on the source (see etcdSink.advance).
package datastore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// KeyValue, LogRow and LeaseRow are the rows that move.
type (
	KeyValue = sqlstore.KeyValue
	LogRow   = sqlstore.LogRow
	LeaseRow = sqlstore.LeaseRow
)

// Header describes what a Source holds.
type Header struct {
	// Revision is the revision the copy is at; CompactRevision the oldest
	// revision its history can serve.
	Revision, CompactRevision int64
	// History is true when the source has a revision log to copy.
	History bool
	// Keys, Leases and LogRows count what follows, for progress; -1 when
	// unknown.
	Keys, Leases, LogRows int64
	// Kind names the source's kind: sqlite, postgres, mysql, etcd,
	// etcd-snapshot or dump.
	Kind string
	// Meta is what the copy's maker attached to it (Options.Meta): a
	// dump keeps it in its header, other targets ignore it.
	Meta map[string]string
}

// Source is a consistent copy of one datastore. Its methods are called
// once each, in the order Leases, Current, History.
type Source interface {
	Header() Header
	// Leases calls fn with batches of leases.
	Leases(ctx context.Context, fn func([]LeaseRow) error) error
	// Current calls fn with batches of the live keys, in key order.
	Current(ctx context.Context, fn func([]KeyValue) error) error
	// History calls fn with batches of log rows in revision order; it
	// does nothing unless Header().History.
	History(ctx context.Context, fn func([]LogRow) error) error
	// Describe names the source without secrets.
	Describe() string
	Close() error
}

// Sink receives a Source's rows, in the order Begin, Leases, Current,
// History, Commit. Nothing is visible (or, for a file, in place) before
// Commit where the target allows it; Close abandons an uncommitted copy.
type Sink interface {
	Begin(ctx context.Context, h Header) error
	Leases(ctx context.Context, ls []LeaseRow) error
	Current(ctx context.Context, kvs []KeyValue) error
	History(ctx context.Context, rows []LogRow) error
	Commit(ctx context.Context) error
	Describe() string
	Close() error
}

// ErrNotEmpty is returned when the target holds data and the copy is not
// forced.
var ErrNotEmpty = errors.New("datastore: target is not empty (use --force to replace its contents)")

// ErrMismatch is returned when the target, read back, differs from what
// was copied.
var ErrMismatch = errors.New("datastore: verification failed")

// batchSize is how many rows move at a time.
const batchSize = 500

// Digest summarizes a datastore's live keys independently of their order
// and revisions: how many there are and a checksum of their keys, values
// and leases.
type Digest struct {
	Keys   int64
	Leases int64
	// LogRows counts the revision log's rows, when the source has one.
	LogRows int64
	sum     [sha256.Size]byte
}

// Add folds one key into the digest.
func (d *Digest) Add(kv *KeyValue) {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(kv.Key)))])
	h.Write(kv.Key)
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(kv.Value)))])
	h.Write(kv.Value)
	h.Write(n[:binary.PutVarint(n[:], kv.Lease)])
	var one [sha256.Size]byte
	h.Sum(one[:0])
	// XOR: the keys are distinct, so the order they come in does not matter.
	for i := range d.sum {
		d.sum[i] ^= one[i]
	}
	d.Keys++
}

// Checksum is the digest's checksum in hex.
func (d *Digest) Checksum() string { return hex.EncodeToString(d.sum[:]) }

// Equal reports whether two digests describe the same keys, values, leases
// and number of leases.
func (d *Digest) Equal(o *Digest) bool {
	return d.Keys == o.Keys && d.Leases == o.Leases && d.sum == o.sum
}

// Read digests a source's leases and keys, and counts its log rows.
func Read(ctx context.Context, src Source) (*Digest, error) {
	d := &Digest{}
	if err := src.Leases(ctx, func(ls []LeaseRow) error { d.Leases += int64(len(ls)); return nil }); err != nil {
		return nil, err
	}
	err := src.Current(ctx, func(kvs []KeyValue) error {
		for i := range kvs {
			d.Add(&kvs[i])
		}
		return nil
	})
	if err == nil && src.Header().History {
		err = src.History(ctx, func(rows []LogRow) error { d.LogRows += int64(len(rows)); return nil })
	}
	return d, err
}
