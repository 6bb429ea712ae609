package main

import (
	"os"
	"runtime"
	"sync"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/migrations"
)

// commitProcOnce makes addCommitProc act once per process: tests start
// several servers in one.
var commitProcOnce sync.Once

// addCommitProc gives the Go runtime one P (a slot for running Go code)
// more than it chose itself when the datastore is SQLite, unless the user
// set GOMAXPROCS.
//
// SQLite's single writer commits, fsync included, inside a cgo call. The
// runtime counts the writer's P as busy for the whole call until its
// monitor takes the P back, which it does late or not at all when the call
// is short. Under a write-heavy load that leaves a core idle: a 5 s trace of
// `sqlkube bench scheduler`'s in-server variant on 2 cores had the writer
// inside a commit for 29% of the time, and the server used 84% of the two
// cores. With one P more the rest of the server runs during a commit.
// PostgreSQL and MySQL wait on the network, which gives the P back at once.
//
// Setting GOMAXPROCS stops the runtime from following a changing cgroup CPU
// limit; a server started under a limit keeps the value it started with.
func addCommitProc(dialect string, log zerolog.Logger) {
	commitProcOnce.Do(func() {
		cur := runtime.GOMAXPROCS(0)
		if n := commitProcs(dialect, os.Getenv("GOMAXPROCS"), cur); n != cur {
			runtime.GOMAXPROCS(n)
			log.Debug().Int("gomaxprocs", n).Msg("one P more for the SQLite writer, whose commits block in cgo")
		}
	})
}

// commitProcs is the GOMAXPROCS addCommitProc sets: cur+1 for SQLite when
// the environment does not set it, cur otherwise.
func commitProcs(dialect, env string, cur int) int {
	if dialect != string(migrations.SQLite) || env != "" {
		return cur
	}
	return cur + 1
}
