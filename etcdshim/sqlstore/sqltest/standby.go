package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Replication says when a primary acknowledges a commit.
type Replication int

const (
	// Synchronous: once the standby has flushed it to its disk
	// (synchronous_standby_names names the standby, synchronous_commit=on).
	Synchronous Replication = iota
	// Asynchronous: once it is on the primary's disk; the standby follows
	// as fast as it can.
	Asynchronous
)

func (r Replication) String() string {
	if r == Synchronous {
		return "synchronous"
	}
	return "asynchronous"
}

// standbyName is the standby's application_name, which the primary's
// synchronous_standby_names names.
const standbyName = "sqlkube_standby"

// NewReplicatedPostgres initdbs and starts a private primary and a
// streaming standby of it (pg_basebackup), each in a directory and on a
// port of its own, and returns once the standby streams (and, with
// Synchronous, once the primary counts it as its synchronous standby).
// The primary is started with its replication settings, so every commit
// from the first one on waits as mode says. The standby is a hot
// standby: it accepts read-only connections until it is promoted, and
// has no synchronous standby of its own, so after Promote its commits
// wait for nobody.
func NewReplicatedPostgres(t testing.TB, mode Replication) (primary, standby *PrivatePostgres) {
	t.Helper()
	primary = newPrivateDir(t)
	primary.initdb(t)
	if mode == Synchronous {
		primary.settings = []string{"synchronous_standby_names=" + standbyName, "synchronous_commit=on"}
	}
	primary.Start(t)

	standby = newPrivateDir(t)
	out, err := standby.command(filepath.Join(standby.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port),
		"-U", "postgres", "-D", standby.data(), "--checkpoint=fast", "--no-sync", "-X", "stream").CombinedOutput()
	if err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	conninfo := fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=%s'\n", primary.Port, standbyName)
	standby.appendFile(t, "postgresql.auto.conf", conninfo)
	standby.appendFile(t, "standby.signal", "")
	standby.Start(t)

	want := "async"
	if mode == Synchronous {
		want = "sync"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var state, syncState string
	for {
		err := primary.query(ctx, "postgres", func(db *sql.DB) error {
			return db.QueryRowContext(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, standbyName).Scan(&state, &syncState)
		})
		if err == nil && state == "streaming" && syncState == want {
			return primary, standby
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the standby is not a streaming %s standby within a minute: state %q, sync_state %q (%v)\nstandby's log:\n%s", mode, state, syncState, err, standby.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// appendFile appends text to a file of the data directory (creating it,
// owned by the server's user).
func (p *PrivatePostgres) appendFile(t testing.TB, name, text string) {
	t.Helper()
	path := filepath.Join(p.data(), name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if p.runAs != "" {
		if err := os.Chown(path, p.uid, p.gid); err != nil {
			t.Fatal(err)
		}
	}
}

// query runs fn on a connection to database db of the server.
func (p *PrivatePostgres) query(ctx context.Context, db string, fn func(*sql.DB) error) error {
	conn, err := sql.Open("pgx", p.DSN(db))
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(conn)
}

// MultiHostDSN is a connection string for database db that names every
// server given, in that order, and connects only to one that accepts
// writes (target_session_attrs=read-write), as clients of a replicated
// PostgreSQL are configured to find its primary.
func MultiHostDSN(db string, servers ...*PrivatePostgres) string {
	hosts := make([]string, len(servers))
	for i, p := range servers {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", p.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write", strings.Join(hosts, ","), db)
}

// DB opens database db on the server, for a test's own queries (a
// standby answers read-only ones); it is closed when the test ends.
func (p *PrivatePostgres) DB(t testing.TB, db string) *sql.DB {
	t.Helper()
	conn, err := sql.Open("pgx", p.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// WaitReplayed waits until a standby has replayed every WAL record it
// received (and, its primary gone, will receive no more): what it shows
// then is what it will have when promoted.
func (p *PrivatePostgres) WaitReplayed(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var done bool
	var err error
	for {
		err = p.query(ctx, "postgres", func(db *sql.DB) error {
			return db.QueryRowContext(ctx, `SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()`).Scan(&done)
		})
		if err == nil && done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the standby has not replayed what it received within 30 s (%v)", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Promote ends a standby's recovery (pg_ctl promote) and returns once it
// accepts writes.
func (p *PrivatePostgres) Promote(t testing.TB) {
	t.Helper()
	if err := p.pgctl("promote"); err != nil {
		t.Fatalf("%v\n%s", err, p.Log())
	}
}

// Kill kills the server as a crash would, with SIGKILL: the postmaster
// alone (its other processes then notice that it is gone and exit by
// themselves, as PostgreSQL's do), or, with all, every process of the
// server at once, as when the machine it runs on dies. Either way it
// returns once none of them is left, and says how long that took. The
// server is not restarted: its port refuses connections from then on.
func (p *PrivatePostgres) Kill(t testing.TB, all bool) time.Duration {
	t.Helper()
	pidFile, err := os.ReadFile(filepath.Join(p.data(), "postmaster.pid"))
	if err != nil {
		t.Fatalf("the server is not running: %v", err)
	}
	lines := strings.Split(string(pidFile), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		t.Fatalf("postmaster.pid: %q", lines[0])
	}
	// Line 7 holds the System V shared memory segment's key and id, which
	// a killed postmaster leaves behind.
	shmid := -1
	if len(lines) > 6 {
		if f := strings.Fields(lines[6]); len(f) == 2 {
			shmid, _ = strconv.Atoi(f[1])
		}
	}
	procs := append([]int{pid}, childrenOf(pid)...)
	start := time.Now()
	victims := procs[:1]
	if all {
		victims = procs
	}
	for _, v := range victims {
		if err := syscall.Kill(v, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			t.Fatalf("kill %d: %v", v, err)
		}
	}
	deadline := start.Add(30 * time.Second)
	for _, v := range procs {
		if err := waitExit(v, deadline); err != nil {
			t.Fatalf("process %d of the killed PostgreSQL: %v", v, err)
		}
	}
	took := time.Since(start)
	if shmid >= 0 {
		_, _ = unix.SysvShmCtl(shmid, unix.IPC_RMID, nil)
	}
	return took
}

// StopSending pauses (SIGSTOP) the primary's WAL senders, so that a
// standby receives nothing more while the primary goes on committing
// (with Asynchronous replication, acknowledging too). The returned
// function resumes them; Kill with all kills them too.
func (p *PrivatePostgres) StopSending(t testing.TB) (resume func()) {
	t.Helper()
	var pids []int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.query(ctx, "postgres", func(db *sql.DB) error {
		rows, err := db.QueryContext(ctx, `SELECT pid FROM pg_stat_replication`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				return err
			}
			pids = append(pids, pid)
		}
		return rows.Err()
	})
	if err != nil || len(pids) == 0 {
		t.Fatalf("no WAL sender to stop (%v)", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP the WAL sender %d: %v", pid, err)
		}
	}
	return func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(n); ok && ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// waitExit waits until process pid (not a child of ours) has exited,
// through a pidfd, which becomes readable then.
func waitExit(pid int, deadline time.Time) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("still runs 30 s after SIGKILL")
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll its pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}

// parentOf reads a process's parent from /proc/PID/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
