package datastore

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// sqlSource reads a sqlkube datastore table for table, in one snapshot.
type sqlSource struct{ e *sqlstore.Export }

var _ Source = (*sqlSource)(nil)

// NewSQLSource is a Source over an Export (a tenant's on a shared pool,
// say); closing the Source closes it.
func NewSQLSource(e *sqlstore.Export) Source { return &sqlSource{e: e} }

func openSQLSource(ctx context.Context, dsn string) (*sqlSource, error) {
	e, err := sqlstore.OpenExport(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return &sqlSource{e: e}, nil
}

func (s *sqlSource) Header() Header {
	return Header{Revision: s.e.Revision, CompactRevision: s.e.CompactRevision, History: true,
		Keys: s.e.NumKeys, Leases: s.e.NumLeases, LogRows: s.e.NumLogRows, Kind: s.e.DialectName()}
}

func (s *sqlSource) Leases(ctx context.Context, fn func([]LeaseRow) error) error {
	return s.e.Leases(ctx, batchSize, fn)
}

func (s *sqlSource) Current(ctx context.Context, fn func([]KeyValue) error) error {
	return s.e.Current(ctx, batchSize, fn)
}

func (s *sqlSource) History(ctx context.Context, fn func([]LogRow) error) error {
	return s.e.Log(ctx, batchSize, fn)
}

func (s *sqlSource) Describe() string { return s.e.Describe() }
func (s *sqlSource) Close() error     { return s.e.Close() }

// sqlSink loads a sqlkube datastore in one transaction. From a source
// without history it writes one log row per live key (its current version,
// at its mod revision), which is the log a compaction at the source's
// revision would have left, and records that compaction.
type sqlSink struct {
	im *sqlstore.Import
	h  Header
	// subs numbers the synthesized log rows of each revision.
	subs map[int64]int64
}

var _ Sink = (*sqlSink)(nil)

// NewSQLSink is a Sink into an Import; closing the Sink closes it.
func NewSQLSink(im *sqlstore.Import) Sink { return &sqlSink{im: im} }

func openSQLSink(ctx context.Context, dsn string, force bool) (*sqlSink, error) {
	im, err := sqlstore.OpenImport(ctx, dsn, force)
	if errors.Is(err, sqlstore.ErrNotEmpty) {
		return nil, fmt.Errorf("%w: %v", ErrNotEmpty, err)
	}
	if err != nil {
		return nil, err
	}
	return &sqlSink{im: im}, nil
}

func (s *sqlSink) Begin(_ context.Context, h Header) error {
	s.h = h
	if !h.History {
		s.subs = map[int64]int64{}
	}
	return nil
}

func (s *sqlSink) Leases(ctx context.Context, ls []LeaseRow) error { return s.im.Leases(ctx, ls) }

func (s *sqlSink) Current(ctx context.Context, kvs []KeyValue) error {
	for i := range kvs {
		if kvs[i].ModRevision > s.h.Revision || kvs[i].CreateRevision > kvs[i].ModRevision {
			return fmt.Errorf("datastore: key %q has revisions %d/%d beyond the source's %d", kvs[i].Key, kvs[i].CreateRevision, kvs[i].ModRevision, s.h.Revision)
		}
	}
	if err := s.im.Current(ctx, kvs); err != nil {
		return err
	}
	if s.h.History {
		return nil
	}
	rows := make([]LogRow, len(kvs))
	for i, kv := range kvs {
		s.subs[kv.ModRevision]++
		rows[i] = LogRow{Revision: kv.ModRevision, Sub: s.subs[kv.ModRevision], Key: kv.Key,
			CreateRevision: kv.CreateRevision, Version: kv.Version, Lease: kv.Lease, Value: kv.Value}
	}
	return s.im.Log(ctx, rows)
}

func (s *sqlSink) History(ctx context.Context, rows []LogRow) error {
	if !s.h.History {
		return nil
	}
	return s.im.Log(ctx, rows)
}

func (s *sqlSink) Commit(ctx context.Context) error {
	compact := s.h.CompactRevision
	if !s.h.History {
		compact = s.h.Revision
	}
	return s.im.Commit(ctx, s.h.Revision, compact)
}

func (s *sqlSink) Describe() string { return s.im.Describe() }
func (s *sqlSink) Close() error     { return s.im.Close() }
