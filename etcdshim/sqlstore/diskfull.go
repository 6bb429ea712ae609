package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mattn/go-sqlite3"
	"golang.org/x/sys/unix"
)

// A full disk under a SQLite store.
//
// SQLite in WAL mode needs free disk space for every commit, a delete's
// too: its pages go to the WAL first, and a checkpoint may grow the
// database file by the new pages the WAL holds before it can truncate
// the WAL. On a full disk nothing can be deleted and nothing checkpointed,
// so nothing gives space back: the store is wedged until someone frees
// space on the host. So a SQLite store keeps a reserve, a file of
// Options.ReserveBytes beside the database (its path with "-reserve"),
// and while the disk is full it works as follows:
//
//   - The first write, checkpoint or compaction that fails for lack of
//     space (SQLITE_FULL, or ENOSPC under any other SQLite error) puts the
//     store in the disk-full state: the reserve is deleted, which gives its
//     space to what must go on, and requests that could grow the store
//     (those the quota counts: Put, a Txn with a put, LeaseGrant) fail with
//     ErrDiskFull, already queued ones included. A request that was not of
//     that kind and failed only because the disk was full runs again.
//   - Reads, deletes, compaction, lease keepalives and revocations go on:
//     they write little, and into the room the reserve left.
//   - Every diskRecheck the store gives back what it can (a TRUNCATE
//     checkpoint and the database's free pages, in bounded steps) once
//     something changed, and reads the file system's free space. When
//     there is room for the reserve and as much again (at least
//     minResumeRoom), it makes the reserve again and takes writes again:
//     no restart, no operator step.
//
// DiskFull reports the state, Status lists it among the errors, and the
// sqlkube_store_disk_full gauge is 1 while it lasts.
const (
	// DefaultReserveBytes is the reserve of a SQLite store whose
	// Options.ReserveBytes is 0. SQLite checkpoints the WAL at 1,000
	// pages, 16 MiB at sqlkube's 16 KiB pages; a checkpoint may need as
	// much room in the database file, and a compaction step (1,000
	// revisions while the disk is full) or a batch of deletes needs room
	// for its own WAL frames: 64 MiB covers a full WAL's checkpoint and
	// several such steps. On a file system of less than 1 GiB the default
	// is a 16th of it, so that a small disk is not taken up by the
	// reserve and the room the disk-full state waits for (resumeFree).
	DefaultReserveBytes = 64 << 20
	// minResumeRoom is the least free space, beyond the reserve, the
	// disk-full state waits for before it takes writes again: one WAL's
	// worth (see DefaultReserveBytes), so that writes do not fill the
	// disk again at once.
	minResumeRoom = 16 << 20
	// diskRecheck is how often a store whose disk is full looks for
	// space again.
	diskRecheck = time.Second
	// reclaimPages is how many free pages one step of reclaim gives back
	// (4 MiB at 16 KiB pages): moving them goes through the WAL, which
	// each step's checkpoint truncates again.
	reclaimPages = 256
)

// ErrDiskFull refuses a request that could grow the store while the disk
// under a SQLite store is full (see DiskFull). The request did nothing;
// it may be sent again once there is space, which the store finds by
// itself.
var ErrDiskFull = errors.New("sqlstore: the datastore's disk is full: writes that could grow the store are refused until there is space again")

// diskGuard is a SQLite store's reserve and its disk-full state.
type diskGuard struct {
	// path is the reserve file; "" where the store keeps none (not on
	// SQLite, or Options.ReserveBytes negative). size is its size.
	path string
	size int64
	// dir is the database's directory, whose file system is watched.
	dir string
	// sqlite is set on SQLite, the only backend with a disk-full state.
	sqlite bool

	full atomic.Bool
	// mu serializes entering and leaving the disk-full state.
	mu sync.Mutex
	// since is when the disk-full state began; watching is set while the
	// goroutine that looks for space runs.
	since    time.Time
	watching bool
}

// isDiskFull reports whether err is SQLite's failure for lack of space.
func isDiskFull(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrFull || se.SystemErrno == syscall.ENOSPC
	}
	return errors.Is(err, syscall.ENOSPC)
}

// DiskFull reports whether the disk under a SQLite store is full (always
// false on PostgreSQL and MySQL), and since when.
func (s *Store) DiskFull() (full bool, since time.Time) {
	g := &s.disk
	if !g.full.Load() {
		return false, time.Time{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.full.Load(), g.since
}

// CheckDiskSpace returns an error that says so while the disk under the
// store is full, nil otherwise: a readiness check.
func (s *Store) CheckDiskSpace(context.Context) error {
	if full, since := s.DiskFull(); full {
		free, _ := freeBytes(s.disk.dir)
		return fmt.Errorf("the datastore's disk is full since %s: writes that could grow the store are refused; reads, deletes and compaction are served, and writes resume by themselves once %d MiB are free (now %d MiB)",
			since.UTC().Format(time.RFC3339), s.disk.resumeFree()>>20, free>>20)
	}
	return nil
}

// ReservePath is the reserve file of a SQLite store ("" where it keeps
// none).
func (s *Store) ReservePath() string { return s.disk.path }

// openReserve sets the guard up at Open, with the store's other
// goroutines able to start: it makes the reserve, or removes one left
// over when the store keeps none. A reserve that does not fit puts the
// store in the disk-full state at once.
func (s *Store) openReserve() {
	g := &s.disk
	if !g.sqlite {
		return
	}
	if g.path == "" {
		if err := os.Remove(s.c.sqlitePath + reserveSuffix); err == nil {
			s.log.Info().Msg("removed the reserve file: the store keeps none")
		}
		s.metrics.reserve.Set(0)
		return
	}
	if g.size < minResumeRoom {
		s.log.Warn().Int64("bytes", g.size).Int64("walCheckpointBytes", minResumeRoom).
			Msg("the datastore's reserve is smaller than a checkpoint of a full WAL may need: on a full disk, deletes and compaction may fail until space is freed by hand")
	}
	if err := makeReserve(g.path, g.size); err != nil {
		s.log.Error().Err(err).Str("path", g.path).Int64("bytes", g.size).Msg("cannot make the datastore's reserve file")
		if errors.Is(err, syscall.ENOSPC) {
			s.enterDiskFull(err)
		}
		return
	}
	s.metrics.reserve.Set(float64(g.size))
}

const reserveSuffix = "-reserve"

// makeReserve makes path a file of size bytes whose blocks are allocated,
// unless it already is one. A new reserve is written beside it and
// renamed into place, so a reserve is whole or absent.
func makeReserve(path string, size int64) error {
	if st, err := os.Stat(path); err == nil && st.Size() == size && allocated(st) >= size {
		return nil
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = writeReserve(f, size) // file systems without fallocate
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("reserve: %w", err)
	}
	return nil
}

// allocated is how many bytes of a file's blocks are on disk.
func allocated(st os.FileInfo) int64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512
	}
	return st.Size()
}

func writeReserve(f *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = 0xa5 // not zeros, which some file systems store as holes
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return nil
}

// freeBytes is the space the file system under dir gives an unprivileged
// writer.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// noteDiskFull puts the store in the disk-full state when err is SQLite's
// failure for lack of space, and then returns ErrDiskFull wrapping it;
// other errors are returned unchanged.
func (s *Store) noteDiskFull(err error) error {
	if err == nil || !s.disk.sqlite || !isDiskFull(err) {
		return err
	}
	s.enterDiskFull(err)
	return fmt.Errorf("%w (%v)", ErrDiskFull, err)
}

// enterDiskFull puts the store in the disk-full state, unless it is in
// it, and gives the reserve back to the file system. It reports whether
// it did (so that what failed may run again in that room).
func (s *Store) enterDiskFull(cause error) (released bool) {
	g := &s.disk
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.full.Load() {
		g.full.Store(true)
		g.since = time.Now()
		s.metrics.diskFull.Set(1)
		s.log.Error().Err(cause).Msg("the datastore's disk is full: writes that could grow the store are refused; reads, deletes and compaction go on, and writes resume by themselves once there is space")
	}
	if g.path != "" {
		switch err := os.Remove(g.path); {
		case err == nil:
			released = true
			s.metrics.reserve.Set(0)
			s.log.Warn().Str("path", g.path).Int64("bytes", g.size).Msg("reserve file released for deletes, compaction and checkpoints")
		case !errors.Is(err, os.ErrNotExist):
			s.log.Error().Err(err).Str("path", g.path).Msg("cannot release the reserve file")
		}
	}
	if !g.watching {
		s.closeMu.Lock()
		if !s.closed {
			g.watching = true
			s.wg.Add(1)
			go s.watchDiskSpace()
		}
		s.closeMu.Unlock()
	}
	return released
}

// watchDiskSpace runs while the disk is full: every diskRecheck it gives
// back what the store no longer needs, once something was committed or
// compacted since it last did, and takes writes again once there is
// space.
func (s *Store) watchDiskSpace() {
	defer s.wg.Done()
	tick := time.NewTicker(diskRecheck)
	defer tick.Stop()
	var reclaimed [2]int64
	first := true
	for {
		if now := s.knownRevisionPair(); first || now != reclaimed {
			ctx, cancel := context.WithTimeout(s.stopCtx, batchTimeout)
			err := s.reclaim(ctx)
			cancel()
			if err == nil {
				reclaimed, first = now, false
			} else if s.stopCtx.Err() == nil {
				s.log.Debug().Err(err).Msg("giving space back while the disk is full failed; trying again")
			}
		}
		if s.tryResume() {
			return
		}
		select {
		case <-s.stopCtx.Done():
			s.disk.mu.Lock()
			s.disk.watching = false
			s.disk.mu.Unlock()
			return
		case <-tick.C:
		}
	}
}

func (s *Store) knownRevisionPair() [2]int64 {
	cur, compacted := s.KnownRevisions()
	return [2]int64{cur, compacted}
}

// resumeFree is the free space the disk-full state waits for: the
// reserve, and as much again (at least minResumeRoom) for writes.
func (g *diskGuard) resumeFree() int64 {
	size := max(g.size, 0)
	return size + max(size, minResumeRoom)
}

// tryResume leaves the disk-full state when the file system has
// resumeFree bytes free and the reserve could be made again. It reports
// whether the store takes writes again.
func (s *Store) tryResume() bool {
	g := &s.disk
	free, err := freeBytes(g.dir)
	if err != nil {
		s.log.Warn().Err(err).Str("dir", g.dir).Msg("reading the free space of the datastore's file system failed")
		return false
	}
	if free < g.resumeFree() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.path != "" {
		if err := makeReserve(g.path, g.size); err != nil {
			s.log.Debug().Err(err).Msg("making the reserve again failed; trying again")
			return false
		}
		s.metrics.reserve.Set(float64(g.size))
	}
	s.log.Info().Int64("freeBytes", free).Dur("after", time.Since(g.since).Round(time.Millisecond)).
		Msg("the datastore's disk has space again: reserve made again, writes resume")
	g.full.Store(false)
	g.watching = false
	s.metrics.diskFull.Set(0)
	return true
}

// reclaim gives the space the database no longer uses back to the file
// system in bounded steps: a TRUNCATE checkpoint (the WAL back to empty),
// then the free pages, reclaimPages at a time, each step checkpointed
// again, so the WAL never holds more than one step.
func (s *Store) reclaim(ctx context.Context) error {
	if err := s.checkpointTruncate(ctx); err != nil {
		return err
	}
	for prev := int64(-1); ; {
		var free int64
		if err := s.c.write.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
			return fmt.Errorf("sqlstore: reclaim: %w", err)
		}
		// A database made without incremental auto_vacuum (before
		// sqlkube set it) keeps its free pages: VACUUM alone gives them
		// back.
		if free == 0 || free == prev {
			return nil
		}
		prev = free
		if err := s.drainInRoom(ctx, fmt.Sprintf(`PRAGMA incremental_vacuum(%d)`, reclaimPages)); err != nil {
			return fmt.Errorf("sqlstore: reclaim: vacuum: %w", err)
		}
		if err := s.checkpointTruncate(ctx); err != nil {
			return err
		}
	}
}

// checkpointTruncate checkpoints the whole WAL into the database and
// truncates it. Readers still using the WAL may keep it from completing
// (SQLite then reports busy, not an error): it is then tried again later.
func (s *Store) checkpointTruncate(ctx context.Context) error {
	if err := s.drainInRoom(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("sqlstore: checkpoint: %w", err)
	}
	return nil
}

// execInRoom runs a statement on the writer's connection. One that fails
// for lack of space puts the store in the disk-full state and, when that
// gave the reserve back, runs once more in the room it left; its error is
// then ErrDiskFull.
func (s *Store) execInRoom(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := s.c.write.ExecContext(ctx, query, args...)
	if err != nil && s.disk.sqlite && isDiskFull(err) && s.enterDiskFull(err) {
		res, err = s.c.write.ExecContext(ctx, query, args...)
	}
	return res, s.noteDiskFull(err)
}

// drainInRoom is execInRoom for a statement that may return rows (see
// drain).
func (s *Store) drainInRoom(ctx context.Context, stmt string) error {
	err := drain(ctx, s.c.write, stmt)
	if err != nil && s.disk.sqlite && isDiskFull(err) && s.enterDiskFull(err) {
		err = drain(ctx, s.c.write, stmt)
	}
	return s.noteDiskFull(err)
}

// init sets g up for a store on c with opts.
func (g *diskGuard) init(c *conns, opts Options) {
	if c.sqlitePath == "" {
		return
	}
	g.sqlite, g.dir, g.size = true, filepath.Dir(c.sqlitePath), opts.ReserveBytes
	if g.size == 0 {
		g.size = DefaultReserveBytes
		var st unix.Statfs_t
		if err := unix.Statfs(g.dir, &st); err == nil {
			g.size = min(g.size, int64(st.Blocks)*int64(st.Bsize)/16)
		}
	}
	if g.size > 0 {
		g.path = c.sqlitePath + reserveSuffix
	}
}
