package election_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/internal/panics"
)

// within fails the test unless ch is closed or receives within 10 s.
func within[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// TestGate_Terms: components run only inside a term, every component
// of the gate in each term, and a term ends only once they have
// returned.
func TestGate_Terms(t *testing.T) {
	g := election.NewGate()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var running atomic.Int32
	started := make(chan int, 8)
	runs := make(chan error, 2)
	for i := range 2 {
		go func() {
			runs <- g.Run(ctx, func(ctx context.Context) {
				running.Add(1)
				defer running.Add(-1)
				started <- i
				<-ctx.Done()
				time.Sleep(20 * time.Millisecond) // a component that takes its time to stop
			})
		}()
	}
	if g.Open() {
		t.Fatal("a new gate is open")
	}
	select {
	case i := <-started:
		t.Fatalf("component %d ran with the gate closed", i)
	case <-time.After(100 * time.Millisecond):
	}
	for term := range 2 {
		termCtx, endTerm := context.WithCancel(ctx)
		led := make(chan struct{})
		go func() { defer close(led); g.Lead(termCtx) }()
		seen := map[int]bool{within(t, "a component to start", started): true, within(t, "the other component to start", started): true}
		if len(seen) != 2 || !g.Open() {
			t.Fatalf("term %d: components started %v, open %v", term, seen, g.Open())
		}
		endTerm()
		within(t, "the term to end", led)
		if n := running.Load(); n != 0 {
			t.Fatalf("term %d ended with %d components still running", term, n)
		}
		if g.Open() {
			t.Fatalf("term %d: the gate is open after Lead returned", term)
		}
	}
	cancel()
	for range 2 {
		if err := within(t, "Run to return", runs); err != nil {
			t.Errorf("Run: %v, want nil", err)
		}
	}
}

// TestGate_LeadReturnsEarly: a component that returns (or panics) inside
// a term runs again in the next term, not at once.
func TestGate_LeadReturnsEarly(t *testing.T) {
	t.Cleanup(panics.Contain(zerolog.Nop())) // recovered, as in sqlkube's processes
	g := election.NewGate()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan int, 8)
	var n atomic.Int32
	runDone := make(chan error, 1)
	go func() {
		runDone <- g.Run(ctx, func(context.Context) {
			c := int(n.Add(1))
			calls <- c
			if c == 1 {
				panic("component failed")
			}
		})
	}()
	termCtx, endTerm := context.WithCancel(ctx)
	led := make(chan struct{})
	go func() { defer close(led); g.Lead(termCtx) }()
	if c := within(t, "the first call", calls); c != 1 {
		t.Fatalf("call %d, want 1", c)
	}
	select {
	case c := <-calls:
		t.Fatalf("call %d in the same term", c)
	case <-time.After(100 * time.Millisecond):
	}
	endTerm()
	within(t, "the first term to end", led)
	termCtx, endTerm = context.WithCancel(ctx)
	defer endTerm()
	go g.Lead(termCtx)
	if c := within(t, "the call in the next term", calls); c != 2 {
		t.Fatalf("call %d, want 2", c)
	}
	cancel()
	if err := within(t, "Run to return", runDone); err != nil {
		t.Errorf("Run: %v, want nil", err)
	}
}
