package fake

import (
	"math/rand/v2"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A node woken at nextWake always has a heartbeat due. When it had none
// (a status due time checked unrounded), the node was queued again at
// once, over and over until the exact time passed: an idle simulator
// spun for up to a tick per node per status interval.
func TestNextWakeHasHeartbeatDue(t *testing.T) {
	s := &Simulator{opts: Options{RenewInterval: DefaultRenewInterval, StatusInterval: DefaultStatusInterval}}
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	for i := range 10000 {
		renew := metav1.NewMicroTime(base.Add(time.Duration(rng.Int64N(int64(time.Hour)))).Truncate(time.Microsecond))
		n := &node{
			lease:      &coordv1.Lease{Spec: coordv1.LeaseSpec{RenewTime: &renew}},
			lastStatus: renew.Add(-time.Duration(rng.Int64N(int64(s.opts.StatusInterval)))),
		}
		wake := s.nextWake(n)
		if !s.statusDue(n, wake) && !s.leaseDue(n, wake) {
			t.Fatalf("case %d: woken at %v with nothing due (lease renewed %v, status written %v)", i, wake, renew.Time, n.lastStatus)
		}
		if wake.After(renew.Add(s.opts.RenewInterval)) {
			t.Fatalf("case %d: woken at %v, after the renewal due at %v", i, wake, renew.Add(s.opts.RenewInterval))
		}
		if before := wake.Add(-s.tick()); s.statusDue(n, before) {
			t.Fatalf("case %d: the status was due at %v already, a tick before the wake at %v", i, before, wake)
		}
	}
}
