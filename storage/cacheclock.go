package storage

import (
	"time"

	"k8s.io/utils/clock"
)

// Upstream's watch cache wakes every second (jittered by a quarter) to hand
// the bookmarks that are due to the watches it serves. Here the fan-out
// serves watches, and the watch cache only those the fan-out passes to it
// (before the ring is filled, or from a resourceVersion older than the
// ring): most of its wakeups find no watcher, in each of a server's ~70
// resources, every second.
const (
	upstreamBookmarkTick = time.Second
	bookmarkJitter       = upstreamBookmarkTick / 4
)

// bookmarkClock is the watch cache's clock with its bookmark timer slowed
// down: a timer of about a second (upstream's bookmark tick; no other
// timer of the watch cache is, which TestBookmarkClock_OneTimer checks
// against the upstream code) lasts tick/second times longer, jitter
// included. Its other timers (the progress requester's 100 ms, a
// freshness wait of 3 s, the snapshot compactor's 15 s) are unchanged.
type bookmarkClock struct {
	clock.WithTicker
	tick time.Duration
}

// isBookmarkTick reports whether d is upstream's bookmark tick, jittered.
func isBookmarkTick(d time.Duration) bool {
	return d >= upstreamBookmarkTick-bookmarkJitter && d <= upstreamBookmarkTick+bookmarkJitter
}

func (c bookmarkClock) stretch(d time.Duration) time.Duration {
	if !isBookmarkTick(d) {
		return d
	}
	return time.Duration(float64(d) * float64(c.tick) / float64(upstreamBookmarkTick))
}

func (c bookmarkClock) NewTimer(d time.Duration) clock.Timer {
	return stretchedTimer{Timer: c.WithTicker.NewTimer(c.stretch(d)), c: c}
}

// stretchedTimer is a timer whose Reset stretches as its clock's NewTimer.
type stretchedTimer struct {
	clock.Timer
	c bookmarkClock
}

func (t stretchedTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.stretch(d)) }
