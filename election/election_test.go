package election_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/election"
)

// fast are short lease timings for tests.
func fast(cs *fake.Clientset, id string) election.Options {
	return election.Options{
		Client: cs, Namespace: "kube-system", Name: "test", Identity: id,
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	}
}

// candidate runs one election in the background; leading tells whether
// its component runs now.
type candidate struct {
	leading atomic.Bool
	led     chan struct{} // closed the first time it leads
	done    chan error
	cancel  context.CancelFunc
}

func start(t *testing.T, opts election.Options) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{led: make(chan struct{}), done: make(chan error, 1), cancel: cancel}
	first := true
	go func() {
		c.done <- election.Run(ctx, opts, func(ctx context.Context) {
			c.leading.Store(true)
			if first {
				first = false
				close(c.led)
			}
			<-ctx.Done()
			c.leading.Store(false)
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Error("election.Run did not return after its context ended")
		}
	})
	return c
}

func waitFor(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestRun_OneLeaderThenHandOver(t *testing.T) {
	cs := fake.NewSimpleClientset()
	a := start(t, fast(cs, "a"))
	waitFor(t, "a to lead", a.led)
	b := start(t, fast(cs, "b"))
	// b must not lead while a renews; a few retry periods show it.
	deadline := time.Now().Add(700 * time.Millisecond)
	for time.Now().Before(deadline) {
		if b.leading.Load() {
			t.Fatal("two leaders at once")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// a stops: its component stops before Run returns, the lease is
	// released, and b takes over.
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("a: Run = %v, want nil after its context ended", err)
	}
	a.done <- nil // for the cleanup
	if a.leading.Load() {
		t.Fatal("a's component still runs after Run returned")
	}
	waitFor(t, "b to lead after a stopped", b.led)
	lease, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), "test", metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != "b" {
		t.Fatalf("lease holder after hand-over: %v %v", lease, err)
	}
}

// steal makes someone else hold the lease for a long time. The fake
// client checks no resourceVersion, so the old holder's writes are
// refused from then on, as a real API server refuses a stale update.
func steal(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	ctx := context.Background()
	lease, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("thief"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &metav1.MicroTime{Time: time.Now()}, AcquireTime: &metav1.MicroTime{Time: time.Now()}}
	if _, err := cs.CoordinationV1().Leases("kube-system").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ptr.Deref(l.Spec.HolderIdentity, "") != "thief" {
			return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), l.Name, errors.New("stale"))
		}
		return false, nil, nil
	})
}

func TestRun_LostLease(t *testing.T) {
	t.Run("returns ErrLost", func(t *testing.T) {
		cs := fake.NewSimpleClientset()
		a := start(t, fast(cs, "a"))
		waitFor(t, "a to lead", a.led)
		steal(t, cs)
		select {
		case err := <-a.done:
			if !errors.Is(err, election.ErrLost) {
				t.Fatalf("Run = %v, want ErrLost", err)
			}
			a.done <- err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after the lease was taken")
		}
		if a.leading.Load() {
			t.Fatal("the component still runs after the lease was lost")
		}
	})
	t.Run("recampaigns", func(t *testing.T) {
		cs := fake.NewSimpleClientset()
		opts := fast(cs, "a")
		opts.Recampaign = true
		var stops atomic.Int32
		opts.OnLeading = func(leading bool) {
			if !leading {
				stops.Add(1)
			}
		}
		a := start(t, opts)
		waitFor(t, "a to lead", a.led)
		steal(t, cs)
		deadline := time.Now().Add(10 * time.Second)
		for stops.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if stops.Load() == 0 || a.leading.Load() {
			t.Fatal("the component did not stop when the lease was lost")
		}
		select {
		case err := <-a.done:
			t.Fatalf("Run returned %v; with Recampaign it stands again", err)
		default:
		}
	})
}
