package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestStepDownWhenStale: a term ends as soon as the lease has gone
// unrenewed for the renew deadline (as after the process was paused), and
// not while it is renewed.
func TestStepDownWhenStale(t *testing.T) {
	stale := &heldLock{Interface: &recordLock{}}
	stale.renewed = time.Now().Add(-time.Minute)
	stopped := make(chan struct{})
	staleCtx, staleStop := context.WithCancel(context.Background())
	defer staleStop()
	go stepDownWhenStale(&term{ctx: staleCtx, lock: stale, renewDeadline: 10 * time.Second, stop: func() { close(stopped); staleStop() }}, 10*time.Millisecond)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("a lease unrenewed for a minute did not end the term")
	}

	fresh := &heldLock{Interface: &recordLock{}}
	fresh.renewed = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var calls atomic.Int32
	stepDownWhenStale(&term{ctx: ctx, lock: fresh, renewDeadline: 10 * time.Second, stop: func() { calls.Add(1) }}, 10*time.Millisecond)
	if calls.Load() != 0 {
		t.Fatal("a lease renewed just now ended the term")
	}
}

// slowLock answers Update only when release is closed, as a lease write
// in flight while the process was paused.
type slowLock struct {
	resourcelock.Interface
	release chan struct{}
}

func (s slowLock) Identity() string { return "me" }

func (s slowLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	<-s.release
	return nil
}

// TestHeldLock_RenewedWhenSent: a renewal counts from when it was sent, so
// one whose answer came late (after a pause) does not make a stale lease
// look fresh.
func TestHeldLock_RenewedWhenSent(t *testing.T) {
	release := make(chan struct{})
	l := &heldLock{Interface: slowLock{release: release}}
	done := make(chan error, 1)
	go func() {
		done <- l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
	}()
	const pause = 300 * time.Millisecond
	time.Sleep(pause) // the pause being modelled: a time, not a condition
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !l.held.Load() {
		t.Fatal("a successful write as holder was not recorded")
	}
	if got := l.sinceRenewed(); got < pause {
		t.Fatalf("renewal dated %v ago, after its answer; it was sent %v ago", got, pause)
	}
}

// TestTerm_Active: a term is active while its context lives and the lease
// is fresh; found stale, it reports false and ends itself at once.
func TestTerm_Active(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lock := &heldLock{Interface: &recordLock{}}
	lock.renewed = time.Now()
	tm := &term{ctx: ctx, lock: lock, renewDeadline: time.Minute, stop: cancel}
	remove := terms.add("term-test", tm)
	defer remove()
	if !tm.active() || !Leading("term-test") {
		t.Fatal("a fresh term is not active")
	}
	lock.mu.Lock()
	lock.renewed = time.Now().Add(-2 * time.Minute)
	lock.mu.Unlock()
	if Leading("term-test") {
		t.Fatal("a term unrenewed past its deadline still leads")
	}
	if ctx.Err() == nil {
		t.Fatal("a term found stale was not ended")
	}
	remove()
	if Leading("term-test") {
		t.Fatal("a removed term still leads")
	}
}

// recordLock is a lease whose Get answers holder and whose Update counts
// the writes it is given.
type recordLock struct {
	resourcelock.Interface
	holder  string
	updates []resourcelock.LeaderElectionRecord
}

func (r *recordLock) Identity() string { return "me" }

func (r *recordLock) Describe() string { return "test/lease" }

func (r *recordLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: r.holder}, []byte(r.holder), nil
}

func (r *recordLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	r.updates = append(r.updates, ler)
	return nil
}

// TestHeldLock_ReleaseOnlyOwnLease: client-go's release (read, then write
// an empty holder) goes through only when the read names this candidate;
// a lease another candidate took meanwhile is left alone.
func TestHeldLock_ReleaseOnlyOwnLease(t *testing.T) {
	ctx := context.Background()
	taken := &recordLock{holder: "other"}
	l := &heldLock{Interface: taken}
	if _, _, err := l.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{}); err == nil || len(taken.updates) != 0 {
		t.Fatalf("released a lease held by another candidate: err %v, writes %v", err, taken.updates)
	}
	// Renewing is not a release: it goes through whatever was read (the
	// API server refuses a stale one).
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil || len(taken.updates) != 1 {
		t.Fatalf("a renewal was held back: err %v, writes %v", err, taken.updates)
	}

	own := &recordLock{holder: "me"}
	l = &heldLock{Interface: own}
	if _, _, err := l.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil || len(own.updates) != 1 {
		t.Fatalf("did not release its own lease: err %v, writes %v", err, own.updates)
	}
}
