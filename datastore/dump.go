package datastore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The dump format is sqlkube's portable backup of any datastore: a gzip
// stream of JSON lines (bytes are base64, as encoding/json writes them),
// each an object with a "kind":
//
//	{"kind":"header","format":"sqlkube-dump/v1","revision":R,"compactRevision":C,"history":true,"keys":N,"leases":N,"logRows":N,"source":"postgres","meta":{…}}
//	{"kind":"lease","id":I,"ttl":S,"expiresAt":MS}                 every lease
//	{"kind":"kv","key":B64,"value":B64,"createRevision":…,"modRevision":…,"version":…,"lease":I}   every live key, in key order
//	{"kind":"log","revision":…,"sub":…,"key":B64,"deleted":false,"createRevision":…,"version":…,"lease":…,"prevRevision":…,"value":B64}   the revision log, in order
//	{"kind":"end","keys":N,"leases":N,"logRows":N,"checksum":HEX}
//
// The end record makes a truncated file detectable; checksum is Digest's.
// The header's meta, if any, is what the dump's maker attached
// (Options.Meta): a tenant backup's name, spec and token.
// `zcat backup.sqlkube.gz | jq` reads it.
const dumpFormat = "sqlkube-dump/v1"

type dumpRecord struct {
	Kind string `json:"kind"`

	Format          string `json:"format,omitempty"`
	Revision        int64  `json:"revision,omitempty"`
	CompactRevision int64  `json:"compactRevision,omitempty"`
	History         bool   `json:"history,omitempty"`
	Keys            int64  `json:"keys,omitempty"`
	Leases          int64  `json:"leases,omitempty"`
	LogRows         int64  `json:"logRows,omitempty"`
	Source          string `json:"source,omitempty"`
	Checksum        string `json:"checksum,omitempty"`
	// Meta is the header's Header.Meta (readers that predate it ignore it).
	Meta map[string]string `json:"meta,omitempty"`

	ID        int64 `json:"id,omitempty"`
	TTL       int64 `json:"ttl,omitempty"`
	ExpiresAt int64 `json:"expiresAt,omitempty"`

	Key            []byte `json:"key,omitempty"`
	Value          []byte `json:"value,omitempty"`
	CreateRevision int64  `json:"createRevision,omitempty"`
	ModRevision    int64  `json:"modRevision,omitempty"`
	Version        int64  `json:"version,omitempty"`
	Lease          int64  `json:"lease,omitempty"`
	Sub            int64  `json:"sub,omitempty"`
	Deleted        bool   `json:"deleted,omitempty"`
	PrevRevision   int64  `json:"prevRevision,omitempty"`
}

var gzipMagic = []byte{0x1f, 0x8b}

// dumpSink writes a dump file: to a temporary file beside it, renamed into
// place by Commit.
type dumpSink struct {
	path, tmp string
	f         *os.File
	zw        *gzip.Writer
	bw        *bufio.Writer
	enc       *json.Encoder
	digest    Digest
	logRows   int64
}

var _ Sink = (*dumpSink)(nil)

func openDumpSink(path string, force bool) (*dumpSink, error) {
	if _, err := os.Stat(path); err == nil && !force {
		return nil, fmt.Errorf("%w: %s exists", ErrNotEmpty, path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("datastore: create dump: %w", err)
	}
	s := &dumpSink{path: path, tmp: f.Name(), f: f}
	s.zw = gzip.NewWriter(f)
	s.bw = bufio.NewWriterSize(s.zw, 1<<20)
	s.enc = json.NewEncoder(s.bw)
	return s, nil
}

func (s *dumpSink) write(r *dumpRecord) error {
	if err := s.enc.Encode(r); err != nil {
		return fmt.Errorf("datastore: write dump: %w", err)
	}
	return nil
}

func (s *dumpSink) Begin(_ context.Context, h Header) error {
	return s.write(&dumpRecord{Kind: "header", Format: dumpFormat, Revision: h.Revision, CompactRevision: h.CompactRevision,
		History: h.History, Keys: h.Keys, Leases: h.Leases, LogRows: h.LogRows, Source: h.Kind, Meta: h.Meta})
}

func (s *dumpSink) Leases(_ context.Context, ls []LeaseRow) error {
	for _, l := range ls {
		s.digest.Leases++
		if err := s.write(&dumpRecord{Kind: "lease", ID: l.ID, TTL: l.TTL, ExpiresAt: l.ExpiresAt}); err != nil {
			return err
		}
	}
	return nil
}

func (s *dumpSink) Current(_ context.Context, kvs []KeyValue) error {
	for i := range kvs {
		kv := &kvs[i]
		s.digest.Add(kv)
		if err := s.write(&dumpRecord{Kind: "kv", Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
			ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}); err != nil {
			return err
		}
	}
	return nil
}

func (s *dumpSink) History(_ context.Context, rows []LogRow) error {
	for i := range rows {
		r := &rows[i]
		s.logRows++
		if err := s.write(&dumpRecord{Kind: "log", Revision: r.Revision, Sub: r.Sub, Key: r.Key, Deleted: r.Deleted,
			CreateRevision: r.CreateRevision, Version: r.Version, Lease: r.Lease, PrevRevision: r.PrevRevision, Value: r.Value}); err != nil {
			return err
		}
	}
	return nil
}

func (s *dumpSink) Commit(context.Context) error {
	if err := s.write(&dumpRecord{Kind: "end", Keys: s.digest.Keys, Leases: s.digest.Leases, LogRows: s.logRows, Checksum: s.digest.Checksum()}); err != nil {
		return err
	}
	err := s.bw.Flush()
	if err == nil {
		err = s.zw.Close()
	}
	if err == nil {
		err = s.f.Sync()
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	if err == nil {
		err = os.Rename(s.tmp, s.path)
	}
	if err != nil {
		os.Remove(s.tmp)
		return fmt.Errorf("datastore: write dump: %w", err)
	}
	return nil
}

func (s *dumpSink) Describe() string { return "dump " + s.path }

func (s *dumpSink) Close() error {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.tmp)
	}
	return nil
}

// dumpSource reads a dump file front to back.
type dumpSource struct {
	path string
	f    *os.File
	zr   *gzip.Reader
	dec  *json.Decoder
	h    Header
	// next is a record read ahead, not yet consumed.
	next *dumpRecord
	end  *dumpRecord
	seen Digest
	logs int64
}

var _ Source = (*dumpSource)(nil)

func openDumpSource(path string) (*dumpSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datastore: open dump: %w", err)
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datastore: %s is not a gzip dump: %w", path, err)
	}
	s := &dumpSource{path: path, f: f, zr: zr, dec: json.NewDecoder(zr)}
	hdr, err := s.read()
	if err == nil && (hdr.Kind != "header" || hdr.Format != dumpFormat) {
		err = fmt.Errorf("datastore: %s is not a %s file", path, dumpFormat)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.h = Header{Revision: hdr.Revision, CompactRevision: hdr.CompactRevision, History: hdr.History,
		Keys: hdr.Keys, Leases: hdr.Leases, LogRows: hdr.LogRows, Kind: "dump", Meta: hdr.Meta}
	return s, nil
}

func (s *dumpSource) read() (*dumpRecord, error) {
	if r := s.next; r != nil {
		s.next = nil
		return r, nil
	}
	var r dumpRecord
	if err := s.dec.Decode(&r); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("datastore: dump %s is truncated (no end record)", s.path)
		}
		return nil, fmt.Errorf("datastore: read dump %s: %w", s.path, err)
	}
	if r.Kind == "end" {
		s.end = &r
	}
	return &r, nil
}

// each reads the records of one kind that come next, calling fn on each.
func (s *dumpSource) each(kind string, fn func(r *dumpRecord) error) error {
	for s.end == nil {
		r, err := s.read()
		if err != nil {
			return err
		}
		if r.Kind != kind {
			if r.Kind != "end" {
				s.next = r
			}
			return nil
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (s *dumpSource) Header() Header { return s.h }

func (s *dumpSource) Leases(_ context.Context, fn func([]LeaseRow) error) error {
	var out []LeaseRow
	err := s.each("lease", func(r *dumpRecord) error {
		s.seen.Leases++
		out = append(out, LeaseRow{ID: r.ID, TTL: r.TTL, ExpiresAt: r.ExpiresAt})
		if len(out) == batchSize {
			err := fn(out)
			out = out[:0]
			return err
		}
		return nil
	})
	if err == nil && len(out) > 0 {
		err = fn(out)
	}
	return err
}

func (s *dumpSource) Current(_ context.Context, fn func([]KeyValue) error) error {
	var out []KeyValue
	err := s.each("kv", func(r *dumpRecord) error {
		kv := KeyValue{Key: r.Key, Value: r.Value, CreateRevision: r.CreateRevision, ModRevision: r.ModRevision, Version: r.Version, Lease: r.Lease}
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		s.seen.Add(&kv)
		out = append(out, kv)
		if len(out) == batchSize {
			err := fn(out)
			out = out[:0]
			return err
		}
		return nil
	})
	if err == nil && len(out) > 0 {
		err = fn(out)
	}
	if err == nil && !s.h.History {
		err = s.checkEnd()
	}
	return err
}

func (s *dumpSource) History(_ context.Context, fn func([]LogRow) error) error {
	var out []LogRow
	err := s.each("log", func(r *dumpRecord) error {
		s.logs++
		out = append(out, LogRow{Revision: r.Revision, Sub: r.Sub, Key: r.Key, Deleted: r.Deleted, CreateRevision: r.CreateRevision,
			Version: r.Version, Lease: r.Lease, PrevRevision: r.PrevRevision, Value: r.Value})
		if len(out) == batchSize {
			err := fn(out)
			out = out[:0]
			return err
		}
		return nil
	})
	if err == nil && len(out) > 0 {
		err = fn(out)
	}
	if err == nil {
		err = s.checkEnd()
	}
	return err
}

// checkEnd reads to the end record and checks the file against it.
func (s *dumpSource) checkEnd() error {
	for s.end == nil {
		r, err := s.read()
		if err != nil {
			return err
		}
		if r.Kind != "end" {
			return fmt.Errorf("datastore: dump %s: unexpected %q record", s.path, r.Kind)
		}
	}
	e := s.end
	if e.Keys != s.seen.Keys || e.Leases != s.seen.Leases || e.LogRows != s.logs || e.Checksum != s.seen.Checksum() {
		return fmt.Errorf("%w: dump %s holds %d keys, %d leases, %d log rows (checksum %s); its end record says %d, %d, %d (%s)",
			ErrMismatch, s.path, s.seen.Keys, s.seen.Leases, s.logs, s.seen.Checksum(), e.Keys, e.Leases, e.LogRows, e.Checksum)
	}
	return nil
}

func (s *dumpSource) Describe() string { return "dump " + s.path }

func (s *dumpSource) Close() error {
	s.zr.Close()
	return s.f.Close()
}

// sniff reads the first bytes of a file.
func sniff(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 64)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, err
	}
	return head[:n], nil
}

var sqliteMagic = []byte("SQLite format 3\x00")

func isSQLiteFile(head []byte) bool { return bytes.HasPrefix(head, sqliteMagic) }
func isDumpFile(head []byte) bool   { return bytes.HasPrefix(head, gzipMagic) }
