package e2e

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestHA_Failover: three `sqlkube server` on a private PostgreSQL primary
// with a synchronous streaming standby (both on this machine, each in a
// temporary directory and on a port of its own), through one DSN that
// names both with target_session_attrs=read-write, under the fault
// tests' writers, watchers and leader sampler. After some seconds of load
// the primary's postmaster is killed (SIGKILL). Once the standby has
// replayed everything it received, no resourceVersion any client was
// given (an acknowledged write, a watch event, a list) may be above the
// standby's revision: with synchronous replication the standby has every
// commit that was acknowledged or seen. For 3 s there is no primary, and
// no write may be acknowledged; then the standby is promoted (pg_ctl
// promote), and nobody touches the servers: they must find it by
// themselves. Afterwards every server is ready, every acknowledged write
// is there with its resourceVersion, writes sent after the promotion got
// revisions above everything the standby had, every watcher's view
// equals the final list with no event out of order or repeated and no
// resourceVersion given to two configmaps, and no two servers ever said
// they led the same lease at once.
//
// SQLKUBE_TEST_HA=short or full runs it (make test-ha: full); unset, or
// "off", skips it, so make test does not run it. With
// SQLKUBE_TEST_HA_REPLICATION=async the standby is asynchronous and the
// primary's WAL sender is paused for the last seconds before every
// process of the primary is killed: the test then shows what that loses
// and expects its checks to find it (see docs/reliability.md). The last
// log line has the figures docs/reliability.md reports.
func TestHA_Failover(t *testing.T) {
	var before, after time.Duration
	switch mode := os.Getenv("SQLKUBE_TEST_HA"); mode {
	case "full":
		before, after = 10*time.Second, 20*time.Second
	case "short":
		before, after = 5*time.Second, 10*time.Second
	case "", "off":
		t.Skip("skipping the failover test: SQLKUBE_TEST_HA is not short or full (make test-ha sets it)")
	default:
		t.Fatalf("SQLKUBE_TEST_HA=%q: want short, full or off", mode)
	}
	repl := sqltest.Synchronous
	switch r := os.Getenv("SQLKUBE_TEST_HA_REPLICATION"); r {
	case "", "sync":
	case "async":
		repl = sqltest.Asynchronous
	default:
		t.Fatalf("SQLKUBE_TEST_HA_REPLICATION=%q: want sync or async", r)
	}
	const (
		// How long an asynchronous standby goes without WAL before the kill.
		lag = 2 * time.Second
		// How long there is no primary: what a failover manager takes to
		// decide that the primary is gone (Patroni's default TTL is 30 s).
		noPrimary = 3 * time.Second
	)

	primary, standby := sqltest.NewReplicatedPostgres(t, repl)
	c := newFaultCluster(t, sqltest.MultiHostDSN("sqlkube", primary, standby))
	c.startLoad()
	defer c.stopWriters()
	until(t, commandTimeout, "every watcher to see a write", func() (bool, error) {
		for _, w := range c.watchers {
			w.mu.Lock()
			n := w.events
			w.mu.Unlock()
			if n == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	time.Sleep(before) // the load before the fault is the scenario's
	if repl == sqltest.Asynchronous {
		resume := primary.StopSending(t)
		defer resume()
		t.Logf("%v: paused the primary's WAL sender", c.since())
		time.Sleep(lag) // the standby falls behind for this long
	}

	kill := time.Now()
	gone := primary.Kill(t, repl == sqltest.Asynchronous)
	t.Logf("%v: killed the primary (SIGKILL to %s); its processes were gone after %v", c.since(),
		map[bool]string{true: "every process", false: "the postmaster"}[repl == sqltest.Asynchronous], gone.Round(time.Millisecond))
	// Nothing can commit now. What the standby has is what it will have.
	standby.WaitReplayed(t)
	var standbyRev int64
	if err := standby.DB(t, "sqlkube").QueryRow(`SELECT val FROM kv_meta WHERE name = 'revision'`).Scan(&standbyRev); err != nil {
		t.Fatal(err)
	}
	seen, seenWhat := c.highestSeen()
	t.Logf("%v: the standby is at revision %d; the highest resourceVersion any client was given: %d (%s)", c.since(), standbyRev, seen, seenWhat)
	time.Sleep(time.Until(kill.Add(noPrimary))) // the outage is the fault itself
	promoteAt := time.Now()
	standby.Promote(t)
	promoted := time.Since(promoteAt)
	t.Logf("%v: promoted the standby in %v", c.since(), promoted.Round(time.Millisecond))
	time.Sleep(after) // the load after the fault is the scenario's
	c.stopLoad()

	r := c.check(t, standby.DB(t, "sqlkube"))
	// Revisions around the failover: what was acknowledged before the
	// promotion is on the standby; what was sent after it came after.
	var backwards, unbacked []string
	var resumed time.Duration = -1 // from the kill to the first write acknowledged on the new primary
	c.fig.mu.Lock()
	acks := slices.Clone(c.fig.writes)
	c.fig.mu.Unlock()
	for _, a := range acks {
		if a.at.Before(promoteAt) && a.rv > standbyRev {
			backwards = append(backwards, fmt.Sprintf("%s acknowledged at resourceVersion %d before the promotion, above the standby's %d", a.name, a.rv, standbyRev))
		}
		if a.sent().After(promoteAt) && a.rv <= standbyRev {
			backwards = append(backwards, fmt.Sprintf("%s sent after the promotion got resourceVersion %d, not above the standby's %d", a.name, a.rv, standbyRev))
		}
		if a.sent().After(kill.Add(gone)) && a.at.Before(promoteAt) {
			unbacked = append(unbacked, fmt.Sprintf("%s was acknowledged (resourceVersion %d) while there was no primary", a.name, a.rv))
		}
		// Sent once the old primary was gone: answered by the new one.
		if a.sent().After(kill.Add(gone)) && (resumed < 0 || a.at.Sub(kill) < resumed) {
			resumed = a.at.Sub(kill)
		}
	}
	// The longest stretch in which no writer got an acknowledgement.
	slices.SortFunc(acks, func(a, b ackedWrite) int { return a.at.Compare(b.at) })
	var noWriter time.Duration
	for i := 1; i < len(acks); i++ {
		noWriter = max(noWriter, acks[i].at.Sub(acks[i-1].at))
	}

	c.leaderMu.Lock()
	sampled, led, overlaps := c.sampled, c.led, len(c.overlaps)
	c.leaderMu.Unlock()
	fences := c.fences()
	t.Logf("failover run (%s standby): %d writes acknowledged of %d attempted (%d failed), %d lost; primary killed %v into the load, standby promoted %v later (pg_ctl promote took %v); first write acknowledged on the new primary %v after the kill (%v after the promotion); longest time no writer got an acknowledgement: %v (longest for one writer: %v); resourceVersions: standby at %d, highest a client had %d, %d acknowledged or delivered for two configmaps, %d across the failover out of order; %d watch events over %d watchers, %d relists after 410, %d events out of order or repeated, %d watchers whose view differs from the database, %d servers whose list does; %d fences; %d leader samples (%d with a leader), %d with two leaders",
		repl, len(acks), c.fig.attempts, c.fig.failed, len(r.lost), kill.Sub(c.begin).Round(time.Millisecond), promoteAt.Sub(kill).Round(time.Millisecond), promoted.Round(time.Millisecond),
		resumed.Round(time.Millisecond), (resumed - promoteAt.Sub(kill)).Round(time.Millisecond), noWriter.Round(time.Millisecond),
		c.fig.maxGap.Round(time.Millisecond), standbyRev, seen, len(r.reused), len(backwards), r.events, len(c.watchers), r.relists,
		len(r.disorder), len(r.unequal), len(r.served), fences, sampled, led, overlaps)

	if repl == sqltest.Asynchronous {
		// What an asynchronous standby loses: acknowledged writes, and
		// revisions clients had, which the new primary hands out again.
		for _, what := range [][]string{r.lost, backwards, r.reused} {
			for _, s := range what[:min(5, len(what))] {
				t.Log(s)
			}
		}
		for _, f := range c.servers {
			t.Logf("%s on the lost revisions:\n%s", f.name, f.current().logLines(10, "lost", "fenc"))
		}
		if len(r.lost) == 0 || seen <= standbyRev {
			t.Errorf("the asynchronous standby lost nothing a client had seen (%d writes lost; standby at %d, clients at %d): the run shows nothing", len(r.lost), standbyRev, seen)
		}
		// But no silent gap: the servers fence the lost revisions off,
		// their watchers relist, and what every server lists and every
		// watcher sees is the database's.
		if fences == 0 {
			t.Errorf("no server fenced off the lost revisions")
		}
		if r.relists == 0 {
			t.Errorf("no watcher relisted after the loss")
		}
		for _, s := range r.served {
			t.Error(s)
		}
		for _, s := range r.unequal {
			t.Error(s)
		}
		for _, s := range r.disorder {
			t.Error(s)
		}
		for _, s := range unbacked[:min(10, len(unbacked))] {
			t.Error(s)
		}
		return
	}
	if seen > standbyRev {
		t.Errorf("a client was given resourceVersion %d (%s), which the synchronous standby (at %d) does not have", seen, seenWhat, standbyRev)
	}
	for _, s := range backwards[:min(10, len(backwards))] {
		t.Error(s)
	}
	for _, s := range unbacked[:min(10, len(unbacked))] {
		t.Error(s)
	}
	c.fail(t, r)
	if resumed < 0 {
		t.Errorf("no write was acknowledged after the failover")
	}
}

// highestSeen is the highest resourceVersion a writer or a watcher has
// been given so far, and what gave it.
func (c *faultCluster) highestSeen() (int64, string) {
	var rv int64
	what := "nothing"
	c.fig.mu.Lock()
	for _, a := range c.fig.writes {
		if a.rv > rv {
			rv, what = a.rv, "the create of "+a.name
		}
	}
	c.fig.mu.Unlock()
	for _, w := range c.watchers {
		w.mu.Lock()
		if w.lastRV > rv {
			rv, what = w.lastRV, "the watcher on "+w.server.name
		}
		w.mu.Unlock()
	}
	return rv, what
}
