package main

import (
	"runtime"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

func TestCommitProcs(t *testing.T) {
	for _, c := range []struct {
		dialect, env string
		cur, want    int
	}{
		{"sqlite", "", 2, 3},
		{"sqlite", "2", 2, 2}, // the user's GOMAXPROCS stands
		{"postgres", "", 2, 2},
		{"mysql", "", 8, 8},
	} {
		if got := commitProcs(c.dialect, c.env, c.cur); got != c.want {
			t.Errorf("commitProcs(%q, GOMAXPROCS=%q, %d) = %d, want %d", c.dialect, c.env, c.cur, got, c.want)
		}
	}
}

// TestAddCommitProc_Once: servers started one after another in one process
// (as tests do) add one P in all, not one each.
func TestAddCommitProc_Once(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	before := runtime.GOMAXPROCS(0)
	commitProcOnce = sync.Once{}
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	addCommitProc("sqlite", zerolog.Nop())
	after := runtime.GOMAXPROCS(0)
	addCommitProc("sqlite", zerolog.Nop())
	if got := runtime.GOMAXPROCS(0); got != after {
		t.Errorf("a second server changed GOMAXPROCS again: %d, then %d", after, got)
	}
	if after != before+1 {
		t.Errorf("GOMAXPROCS went from %d to %d, want one more", before, after)
	}
}
