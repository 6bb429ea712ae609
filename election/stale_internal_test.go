package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestStepDownWhenStale: a term ends as soon as the lease has gone
// unrenewed for the renew deadline (as after the process was paused), and
// not while it is renewed.
func TestStepDownWhenStale(t *testing.T) {
	stale := &heldLock{}
	stale.renewed = time.Now().Add(-time.Minute)
	stopped := make(chan struct{})
	go stepDownWhenStale(context.Background(), stale, 10*time.Second, 10*time.Millisecond, func() { close(stopped) })
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("a lease unrenewed for a minute did not end the term")
	}

	fresh := &heldLock{}
	fresh.renewed = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var calls atomic.Int32
	stepDownWhenStale(ctx, fresh, 10*time.Second, 10*time.Millisecond, func() { calls.Add(1) })
	if calls.Load() != 0 {
		t.Fatal("a lease renewed just now ended the term")
	}
}
