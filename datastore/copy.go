package datastore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// OpenSource opens what `--from` names: a datastore DSN (sqlite://,
// postgres://, mysql://, etcd://, etcds://) or a file: an etcd snapshot, a
// sqlkube dump, or a SQLite database such as a backup (told apart by their
// first bytes).
func OpenSource(ctx context.Context, from string) (Source, error) {
	if isEtcdDSN(from) {
		return openEtcdSource(ctx, from)
	}
	if _, err := sqlstore.Dialect(from); err == nil {
		return openSQLSource(ctx, from)
	}
	if strings.Contains(from, "://") {
		return nil, fmt.Errorf("datastore: unknown source %q: want sqlite://, postgres://, mysql://, etcd:// or a file", from)
	}
	head, err := sniff(from)
	if err != nil {
		return nil, fmt.Errorf("datastore: open %s: %w", from, err)
	}
	switch {
	case isEtcdSnapshot(head):
		return openSnapshotSource(from)
	case isDumpFile(head):
		return openDumpSource(from)
	case isSQLiteFile(head):
		return openSQLSource(ctx, "sqlite://"+from)
	}
	return nil, fmt.Errorf("datastore: %s is neither an etcd snapshot, a sqlkube dump nor a SQLite database", from)
}

// OpenSink opens what `--to` names: a datastore DSN, or a file path, which
// gets a dump. A target that holds data is refused with ErrNotEmpty unless
// force.
func OpenSink(ctx context.Context, to string, force bool) (Sink, error) {
	if isEtcdDSN(to) {
		return openEtcdSink(ctx, to, force)
	}
	if _, err := sqlstore.Dialect(to); err == nil {
		return openSQLSink(ctx, to, force)
	}
	if strings.Contains(to, "://") {
		return nil, fmt.Errorf("datastore: unknown target %q: want sqlite://, postgres://, mysql://, etcd:// or a file", to)
	}
	return openDumpSink(to, force)
}

// Options tune Copy.
type Options struct {
	// Progress, if set, receives a progress line now and then.
	Progress io.Writer
	// Meta, if set, is attached to the copy (Header.Meta): a dump file
	// keeps it in its header.
	Meta map[string]string
}

// Result says what a copy moved.
type Result struct {
	// From and To name the source and the target without secrets.
	From, To string
	Source   Header
	Keys     int64
	Leases   int64
	LogRows  int64
	Checksum string
	Took     time.Duration
}

// Copy moves src into dst and commits it. It does not close either.
func Copy(ctx context.Context, src Source, dst Sink, opts Options) (*Result, error) {
	start := time.Now()
	h := src.Header()
	if opts.Meta != nil {
		h.Meta = opts.Meta
	}
	res := &Result{Source: h}
	p := newProgress(opts.Progress, h)
	if ps, ok := dst.(interface{ setProgress(io.Writer) }); ok && opts.Progress != nil {
		ps.setProgress(opts.Progress)
	}
	if err := dst.Begin(ctx, h); err != nil {
		return nil, err
	}
	var digest Digest
	err := src.Leases(ctx, func(ls []LeaseRow) error {
		digest.Leases += int64(len(ls))
		return dst.Leases(ctx, ls)
	})
	if err != nil {
		return nil, err
	}
	err = src.Current(ctx, func(kvs []KeyValue) error {
		for i := range kvs {
			digest.Add(&kvs[i])
		}
		p.keys(int64(len(kvs)))
		return dst.Current(ctx, kvs)
	})
	if err != nil {
		return nil, err
	}
	if h.History {
		err = src.History(ctx, func(rows []LogRow) error {
			res.LogRows += int64(len(rows))
			p.logRows(int64(len(rows)))
			return dst.History(ctx, rows)
		})
		if err != nil {
			return nil, err
		}
	}
	p.line("committing")
	if err := dst.Commit(ctx); err != nil {
		return nil, err
	}
	res.Keys, res.Leases, res.Checksum = digest.Keys, digest.Leases, digest.Checksum()
	res.Took = time.Since(start)
	p.line("done")
	return res, nil
}

// Migrate copies the datastore from names into the one to names, then
// reads the target back and checks that it holds the same keys, values and
// leases (Digest) and, where the target keeps them, revisions: the same
// revision on a SQL target, at least the source's on etcd.
func Migrate(ctx context.Context, from, to string, force bool, opts Options) (*Result, error) {
	if from == to {
		return nil, fmt.Errorf("datastore: --from and --to are the same datastore")
	}
	src, err := OpenSource(ctx, from)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := OpenSink(ctx, to, force)
	if err != nil {
		return nil, err
	}
	return CopyVerified(ctx, src, dst, func(ctx context.Context) (Source, error) { return OpenSource(ctx, to) }, isEtcdDSN(to), opts)
}

// CopyVerified copies src into dst (closing dst), then reads the target
// back through reopen and checks it as Migrate does. etcd says the target
// is an etcd endpoint, which keeps no revisions of its own making.
func CopyVerified(ctx context.Context, src Source, dst Sink, reopen func(context.Context) (Source, error), etcd bool, opts Options) (*Result, error) {
	res, err := Copy(ctx, src, dst, opts)
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	res.From, res.To = src.Describe(), dst.Describe()
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "verifying %s\n", dst.Describe())
	}
	back, err := reopen(ctx)
	if err != nil {
		return nil, fmt.Errorf("datastore: verify: reopen target: %w", err)
	}
	defer back.Close()
	return res, verify(ctx, res, back, etcd)
}

// Verify reads the target back and compares it with what Copy moved.
func Verify(ctx context.Context, res *Result, to string) error {
	back, err := OpenSource(ctx, to)
	if err != nil {
		return fmt.Errorf("datastore: verify: reopen target: %w", err)
	}
	defer back.Close()
	return verify(ctx, res, back, isEtcdDSN(to))
}

// verify compares back, the target read back, with what Copy moved.
func verify(ctx context.Context, res *Result, back Source, etcd bool) error {
	bh := back.Header()
	got, err := Read(ctx, back)
	if err != nil {
		return fmt.Errorf("datastore: verify: %w", err)
	}
	if got.Keys != res.Keys || got.Leases != res.Leases || got.Checksum() != res.Checksum {
		return fmt.Errorf("%w: the target holds %d keys and %d leases (checksum %s); the source had %d and %d (%s)",
			ErrMismatch, got.Keys, got.Leases, got.Checksum(), res.Keys, res.Leases, res.Checksum)
	}
	switch {
	case etcd:
		if bh.Revision < res.Source.Revision {
			return fmt.Errorf("%w: the target is at revision %d, below the source's %d", ErrMismatch, bh.Revision, res.Source.Revision)
		}
	case bh.Revision != res.Source.Revision:
		return fmt.Errorf("%w: the target is at revision %d, the source was at %d", ErrMismatch, bh.Revision, res.Source.Revision)
	}
	if res.Source.History && bh.History && got.LogRows != res.LogRows {
		return fmt.Errorf("%w: the target's log holds %d rows, the source's %d", ErrMismatch, got.LogRows, res.LogRows)
	}
	return nil
}

// ReadHeader reads what the file or datastore from names holds, without
// copying it: for a dump, its header (Meta included).
func ReadHeader(ctx context.Context, from string) (Header, error) {
	src, err := OpenSource(ctx, from)
	if err != nil {
		return Header{}, err
	}
	defer src.Close()
	return src.Header(), nil
}

// Backup writes a consistent copy of the datastore at dsn to path. A
// SQLite datastore is copied with VACUUM INTO into a SQLite file unless
// dump is set; every other datastore (and SQLite with dump) is written as
// a dump file. Either can be given to Migrate (restore) as its source.
func Backup(ctx context.Context, dsn, path string, dump, force bool, opts Options) (*Result, error) {
	if d, err := sqlstore.Dialect(dsn); err == nil && d == "sqlite" && !dump {
		if force {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		} else if _, err := os.Stat(path); err == nil {
			return nil, fmt.Errorf("%w: %s exists", ErrNotEmpty, path)
		}
		start := time.Now()
		if err := sqlstore.BackupSQLite(ctx, dsn, path); err != nil {
			return nil, err
		}
		src, err := OpenSource(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("datastore: read back backup: %w", err)
		}
		defer src.Close()
		d, err := Read(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("datastore: read back backup: %w", err)
		}
		return &Result{From: dsn, To: path, Source: src.Header(), Keys: d.Keys, Leases: d.Leases, LogRows: d.LogRows, Checksum: d.Checksum(), Took: time.Since(start)}, nil
	}
	return Migrate(ctx, dsn, path, force, opts)
}

// progress prints a line at most once a second.
type progress struct {
	w         io.Writer
	h         Header
	k, l      int64
	last      time.Time
	start     time.Time
	keysTotal string
	rowsTotal string
}

func newProgress(w io.Writer, h Header) *progress {
	p := &progress{w: w, h: h, start: time.Now(), keysTotal: "?", rowsTotal: "?"}
	if h.Keys >= 0 {
		p.keysTotal = fmt.Sprint(h.Keys)
	}
	if h.LogRows >= 0 {
		p.rowsTotal = fmt.Sprint(h.LogRows)
	}
	return p
}

func (p *progress) keys(n int64)    { p.k += n; p.tick() }
func (p *progress) logRows(n int64) { p.l += n; p.tick() }

func (p *progress) tick() {
	if p.w == nil || time.Since(p.last) < time.Second {
		return
	}
	p.line("copying")
}

func (p *progress) line(state string) {
	if p.w == nil {
		return
	}
	p.last = time.Now()
	msg := fmt.Sprintf("%s: %d/%s keys", state, p.k, p.keysTotal)
	if p.h.History {
		msg += fmt.Sprintf(", %d/%s log rows", p.l, p.rowsTotal)
	}
	fmt.Fprintf(p.w, "%s (%s)\n", msg, time.Since(p.start).Round(time.Millisecond))
}
