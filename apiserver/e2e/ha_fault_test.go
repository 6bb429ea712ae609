package e2e

import (
	"context"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestHA_Faults: three `sqlkube server` on one private PostgreSQL, with a
// client-go writer per server (moving to another server when its own
// fails) and a watcher on each server. During the run a server is killed
// (SIGKILL) and restarted every few seconds, PostgreSQL itself is
// restarted (immediate stop, as a crash), and the controller manager's
// leader is paused (SIGSTOP) past its lease and resumed. Afterwards every
// acknowledged write is there, every watcher's view equals the final
// list with no event out of order or repeated, no two servers ever said
// they led the same lease at once, every server is ready with nobody's
// help, and the kubernetes Service lists exactly the live servers, and
// no longer a server that stopped.
//
// make test runs it short (about 20 s of faults; SQLKUBE_TEST_HA unset
// or "short"); SQLKUBE_TEST_HA=full (make test-ha) runs a minute of
// faults, and "off" skips it. The last log line has the figures
// docs/reliability.md reports.
func TestHA_Faults(t *testing.T) {
	var chaos, killEvery time.Duration
	switch mode := os.Getenv("SQLKUBE_TEST_HA"); mode {
	case "full":
		chaos, killEvery = 60*time.Second, 2*time.Second
	case "short", "":
		chaos, killEvery = 20*time.Second, 3*time.Second
	case "off":
		t.Skip("skipping the fault test: SQLKUBE_TEST_HA=off")
	default:
		t.Fatalf("SQLKUBE_TEST_HA=%q: want short, full or off", mode)
	}
	pg := sqltest.NewPrivatePostgres(t)
	c := newFaultCluster(t, pg.DSN("sqlkube"))
	servers, fig := c.servers, c.fig
	ctx := context.Background()
	c.startLoad()
	defer c.stopWriters()

	// The faults.
	pgRestartAt, pauseAt := chaos/3, 2*chaos/3
	pgDone, pauseDone := false, false
	for next := 0; time.Since(c.begin) < chaos; next++ {
		f := servers[next%len(servers)]
		f.kill()
		fig.kills++
		took := f.start(t)
		fig.recoveries++
		fig.maxRecovery = max(fig.maxRecovery, took)
		t.Logf("%v: killed and restarted %s (serving again after %v)", c.since(), f.name, took.Round(time.Millisecond))
		if !pgDone && time.Since(c.begin) >= pgRestartAt {
			pg.Stop(t, "immediate")
			pg.Start(t)
			fig.pgRestarts++
			pgDone = true
			t.Logf("%v: restarted PostgreSQL", c.since())
		}
		if !pauseDone && time.Since(c.begin) >= pauseAt {
			// Pause whichever server leads the controller manager.
			if who := leaders(ctx, servers, c.clients)["kube-controller-manager"]; len(who) == 1 {
				for _, p := range servers {
					if p.name == who[0] {
						s := p.current()
						_ = s.cmd.Process.Signal(syscall.SIGSTOP)
						time.Sleep(faultLeaseDuration + 2*time.Second) // the pause is the fault itself
						_ = s.cmd.Process.Signal(syscall.SIGCONT)
						fig.pauses++
						t.Logf("%v: paused %s (the controller manager's leader) for %v", c.since(), p.name, faultLeaseDuration+2*time.Second)
					}
				}
			}
			pauseDone = true
		}
		select {
		case <-time.After(killEvery):
		case <-ctx.Done():
		}
	}
	c.stopLoad()

	// Every server recovers by itself, and what was acknowledged, listed
	// and watched is in the database.
	r := c.check(t, pg.DB(t, "sqlkube"))
	c.fail(t, r)

	// The kubernetes Service names exactly the live servers.
	var want []string
	for _, f := range servers {
		want = append(want, f.advertise)
	}
	slices.Sort(want)
	var got []string
	// listsWant reads the kubernetes Endpoints into got and compares.
	listsWant := func() (bool, error) {
		ep, err := c.clientsets[0].CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = nil
		for _, ss := range ep.Subsets {
			for _, a := range ss.Addresses {
				got = append(got, a.IP)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, want), nil
	}
	until(t, commandTimeout, "the kubernetes endpoints to list the live servers", listsWant)
	// A server that stops leaves it: its lease key is revoked, and the
	// next reconcile of another server drops its address.
	last := servers[len(servers)-1]
	last.current().stop(t)
	want = slices.DeleteFunc(want, func(a string) bool { return a == last.advertise })
	until(t, commandTimeout, "the kubernetes endpoints to drop the stopped server", listsWant)

	fig.relists = r.relists
	c.leaderMu.Lock()
	sampled, led, overlaps := c.sampled, c.led, len(c.overlaps)
	c.leaderMu.Unlock()
	t.Logf("fault run: %v of faults; %d writes acknowledged of %d attempted (%d failed); %d kills, %d recoveries (longest restart to serving %v); %d PostgreSQL restarts; %d leader pauses; %d watch events over %d watchers, %d relists after 410; longest a writer went without an acknowledged write: %v; %d leader samples (%d with a leader), %d with two leaders; %d unacknowledged creates committed after the first read of the database",
		chaos, len(fig.acked), fig.attempts, fig.failed, fig.kills, fig.recoveries, fig.maxRecovery.Round(time.Millisecond),
		fig.pgRestarts, fig.pauses, r.events, len(c.watchers), fig.relists, fig.maxGap.Round(time.Millisecond), sampled, led, overlaps, r.late)
	if len(fig.acked) == 0 || fig.kills == 0 {
		t.Errorf("the run proved nothing: %d writes, %d kills", len(fig.acked), fig.kills)
	}
}
