package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// The fault tests' harness: three `sqlkube server` on one datastore, a
// writer and a watcher per server and a sampler of who leads, and the
// checks every fault test makes afterwards (TestHA_Faults,
// TestHA_Failover).

// The fault tests' leader election is faster than upstream's defaults, so
// that a paused leader loses its leases within the run.
const (
	faultLeaseDuration = 4 * time.Second
	faultRenewDeadline = 3 * time.Second
	faultRetryPeriod   = 500 * time.Millisecond
	faultNamespace     = "ha"
)

// faultServer is one of the fault test's servers: a port and data
// directory of its own that survive its restarts.
type faultServer struct {
	name, dir, advertise string
	port                 int
	args                 []string

	mu   sync.Mutex
	cur  *server  // nil while it is down
	logs []string // what its killed runs wrote to stderr
}

func (f *faultServer) current() *server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// start starts the server on its port and waits until it serves.
func (f *faultServer) start(t *testing.T) time.Duration {
	t.Helper()
	begin := time.Now()
	args := append(slices.Clone(f.args), "--data-dir", f.dir, "--secure-port", strconv.Itoa(f.port),
		"--advertise-address", f.advertise, "--log-format", "json")
	s := launch(t, sqlkubeCommand("", args...), f.dir)
	f.mu.Lock()
	f.cur = s
	f.mu.Unlock()
	return time.Since(begin)
}

// electionLog is what every run of the server logged about leases.
func (f *faultServer) electionLog() string {
	f.mu.Lock()
	all := slices.Clone(f.logs)
	if f.cur != nil {
		all = append(all, f.cur.stderr.String())
	}
	f.mu.Unlock()
	var b strings.Builder
	for i, l := range all {
		fmt.Fprintf(&b, "run %d:\n", i+1)
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, "lease") || strings.Contains(line, "Stepping down") {
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (f *faultServer) kill() {
	f.mu.Lock()
	s := f.cur
	f.cur = nil
	f.mu.Unlock()
	if s != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
		f.mu.Lock()
		f.logs = append(f.logs, s.stderr.String())
		f.mu.Unlock()
	}
}

// faultFigures are what a fault run measured.
type faultFigures struct {
	mu                sync.Mutex
	acked             map[string]string // configmap name → resourceVersion acknowledged
	attempts, failed  int
	maxGap            time.Duration // longest time a writer went without an acknowledged write
	kills, recoveries int
	maxRecovery       time.Duration // longest restart of a killed server until it served
	pgRestarts        int
	pauses            int
	relists           int
	// writes are the acknowledged writes, in the order acknowledged.
	writes []ackedWrite
}

// ackedWrite is an acknowledged write: the configmap, its
// resourceVersion, when it was acknowledged and how long it took.
type ackedWrite struct {
	name string
	rv   int64
	at   time.Time
	took time.Duration
}

// sent is when the write's request was sent.
func (w ackedWrite) sent() time.Time { return w.at.Add(-w.took) }

// faultWriter creates configmaps as fast as it can, starting on server
// first and moving to the next server when one fails (a client with
// every server's address), and records each acknowledged write.
func faultWriter(ctx context.Context, id int, servers []*faultServer, clients func(i int) kubernetes.Interface, fig *faultFigures) {
	target := id % len(servers)
	lastAck := time.Now()
	for seq := 0; ctx.Err() == nil; seq++ {
		name := fmt.Sprintf("w%d-%06d", id, seq)
		cs := clients(target)
		var err error
		var rv string
		sent := time.Now()
		if cs == nil {
			err = fmt.Errorf("%s is down", servers[target].name)
		} else {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var cm *corev1.ConfigMap
			cm, err = cs.CoreV1().ConfigMaps(faultNamespace).Create(rctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"seq": strconv.Itoa(seq)},
			}, metav1.CreateOptions{})
			cancel()
			if err == nil {
				rv = cm.ResourceVersion
			}
		}
		now := time.Now()
		fig.mu.Lock()
		fig.attempts++
		if err == nil {
			fig.acked[name] = rv
			n, _ := strconv.ParseInt(rv, 10, 64)
			fig.writes = append(fig.writes, ackedWrite{name: name, rv: n, at: now, took: now.Sub(sent)})
			fig.maxGap = max(fig.maxGap, now.Sub(lastAck))
			lastAck = now
		} else {
			fig.failed++
		}
		fig.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			target = (target + 1) % len(servers)
			select { // back off a little before the next server
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// faultWatcher watches the test namespace's configmaps on one server for
// the whole run, resuming from the last resourceVersion it saw when the
// stream ends (the server died) and relisting on 410 Gone. It keeps the
// view the events give and every ordering violation.
type faultWatcher struct {
	server *faultServer

	mu         sync.Mutex
	view       map[string]string // name → resourceVersion
	lastRV     int64
	byRV       map[int64]string // every resourceVersion a list or an event gave a configmap, and its name
	violations []string
	events     int
	relists    int
}

func (w *faultWatcher) run(ctx context.Context, client func() kubernetes.Interface) {
	needList := true
	backoff := func() {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		cs := client()
		if cs == nil {
			backoff()
			continue
		}
		if needList {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			list, err := cs.CoreV1().ConfigMaps(faultNamespace).List(rctx, metav1.ListOptions{})
			cancel()
			if err != nil {
				backoff()
				continue
			}
			rv, _ := strconv.ParseInt(list.ResourceVersion, 10, 64)
			w.mu.Lock()
			w.view = map[string]string{}
			for _, cm := range list.Items {
				w.view[cm.Name] = cm.ResourceVersion
				w.sawLocked(cm.ResourceVersion, cm.Name)
			}
			w.lastRV = rv
			w.mu.Unlock()
			needList = false
		}
		w.mu.Lock()
		from := strconv.FormatInt(w.lastRV, 10)
		w.mu.Unlock()
		wi, err := cs.CoreV1().ConfigMaps(faultNamespace).Watch(ctx, metav1.ListOptions{ResourceVersion: from})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				needList = true
				w.mu.Lock()
				w.relists++
				w.mu.Unlock()
			}
			backoff()
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				if st := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(st) || apierrors.IsGone(st) {
					needList = true
					w.mu.Lock()
					w.relists++
					w.mu.Unlock()
				}
				break
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
			w.mu.Lock()
			w.events++
			if rv <= w.lastRV {
				w.violations = append(w.violations, fmt.Sprintf("%s %s at resourceVersion %d after %d", ev.Type, cm.Name, rv, w.lastRV))
			} else {
				w.lastRV = rv
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				w.view[cm.Name] = cm.ResourceVersion
				w.sawLocked(cm.ResourceVersion, cm.Name)
			case watch.Deleted:
				delete(w.view, cm.Name)
			}
			w.mu.Unlock()
		}
		wi.Stop()
	}
}

// sawLocked records that resourceVersion rv was name's. Caller holds w.mu.
func (w *faultWatcher) sawLocked(rv, name string) {
	n, _ := strconv.ParseInt(rv, 10, 64)
	if w.byRV == nil {
		w.byRV = map[int64]string{}
	}
	if other, ok := w.byRV[n]; ok && other != name {
		w.violations = append(w.violations, fmt.Sprintf("resourceVersion %d is %s's and %s's", n, other, name))
	}
	w.byRV[n] = name
}

var leaderMetric = regexp.MustCompile(`(?m)^sqlkube_leader_election_leading\{name="([^"]+)"\} 1$`)

// leaders asks every live server which leases it says it holds
// (leader_election_master_status) and returns, per lease, the servers
// that hold it.
func leaders(ctx context.Context, servers []*faultServer, clients func(i int) kubernetes.Interface) map[string][]string {
	out := map[string][]string{}
	for i, f := range servers {
		cs := clients(i)
		if cs == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(rctx)
		cancel()
		if err != nil {
			continue
		}
		for _, m := range leaderMetric.FindAllStringSubmatch(string(body), -1) {
			out[m[1]] = append(out[m[1]], f.name)
		}
	}
	return out
}

// diff says how the watcher's view differs from want.
func (w *faultWatcher) diff(want map[string]string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("last resourceVersion %d, %d events, %d relists; %s", w.lastRV, w.events, w.relists, mapDiff(w.view, want))
}

// mapDiff says how got (name → resourceVersion) differs from want.
func mapDiff(got, want map[string]string) string {
	var missing, extra []string
	for k, v := range want {
		if got[k] != v {
			missing = append(missing, k+"@"+v)
		}
	}
	for k, v := range got {
		if want[k] != v {
			extra = append(extra, k+"@"+v)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return fmt.Sprintf("%d missing %v; %d unexpected %v", len(missing), missing[:min(8, len(missing))], len(extra), extra[:min(8, len(extra))])
}

// warnings are the JSON log lines at level warn or error, at most 40.
func warnings(logs string) string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out[max(0, len(out)-40):], "\n")
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// faultCluster is three `sqlkube server` on one datastore with a client
// per server, and once started the load: a writer and a watcher per
// server, and a sampler of who leads.
type faultCluster struct {
	servers []*faultServer
	// clientsets time out after 10 s; watchClients do not.
	clientsets, watchClients []kubernetes.Interface
	fig                      *faultFigures
	watchers                 []*faultWatcher
	begin                    time.Time // when the load started

	stopWriters, stopWatchers context.CancelFunc
	writers, watches          sync.WaitGroup

	leaderMu sync.Mutex
	overlaps []string
	sampled  int
	// led counts the samples in which some server led some lease: none
	// would mean the samples could not have seen two leaders either.
	led int
}

// newFaultCluster starts three servers on dsn (the second and third
// joining with the first's token), each with a port and data directory
// that survive its restarts, and creates the test namespace. They are
// stopped when the test ends.
func newFaultCluster(t *testing.T, dsn string) *faultCluster {
	t.Helper()
	base := []string{"server", "--datastore", dsn, "--disable-node", "--disable-dns",
		// One cheap controller: the controller manager still runs, and
		// elects, as a whole one does.
		"--controllers=serviceaccount-controller",
		"--kube-controller-manager-arg=--leader-elect-lease-duration=" + faultLeaseDuration.String(),
		"--kube-controller-manager-arg=--leader-elect-renew-deadline=" + faultRenewDeadline.String(),
		"--kube-controller-manager-arg=--leader-elect-retry-period=" + faultRetryPeriod.String(),
		"--kube-scheduler-arg=--leader-elect-lease-duration=" + faultLeaseDuration.String(),
		"--kube-scheduler-arg=--leader-elect-renew-deadline=" + faultRenewDeadline.String(),
		"--kube-scheduler-arg=--leader-elect-retry-period=" + faultRetryPeriod.String(),
	}
	c := &faultCluster{servers: make([]*faultServer, 3), fig: &faultFigures{acked: map[string]string{}}}
	for i := range c.servers {
		c.servers[i] = &faultServer{name: fmt.Sprintf("server-%d", i), dir: t.TempDir(), port: freePort(t),
			// Addresses of a documentation range (TEST-NET-2): an
			// endpoint may not be a loopback address, and nothing here
			// connects to them.
			advertise: fmt.Sprintf("198.51.100.%d", i+2), args: base}
	}
	t.Cleanup(func() {
		for _, f := range c.servers {
			if s := f.current(); s != nil {
				s.stop(t)
			}
		}
	})
	c.servers[0].start(t)
	token := filepath.Join(c.servers[0].dir, "token")
	for _, f := range c.servers[1:] {
		f.args = append(slices.Clone(base), "--token-file", token)
		f.start(t)
	}
	c.servers[0].args = append(slices.Clone(base), "--token-file", token)

	// Clients, built once per server from its kubeconfig (the address
	// and identity survive restarts).
	for _, f := range c.servers {
		cfg := f.current().restConfig(t, f.current().kubeconfig)
		cfg.QPS, cfg.Burst = 1000, 2000
		cfg.Timeout = 10 * time.Second
		c.clientsets = append(c.clientsets, kubernetes.NewForConfigOrDie(cfg))
		// Watches have no client timeout.
		cfg = f.current().restConfig(t, f.current().kubeconfig)
		cfg.QPS, cfg.Burst = 1000, 2000
		c.watchClients = append(c.watchClients, kubernetes.NewForConfigOrDie(cfg))
	}
	if _, err := c.clientsets[0].CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: faultNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// clients is server i's client, nil while it is down.
func (c *faultCluster) clients(i int) kubernetes.Interface {
	if c.servers[i].current() == nil {
		return nil
	}
	return c.clientsets[i]
}

// since is the time since the load started, for logs.
func (c *faultCluster) since() time.Duration { return time.Since(c.begin).Round(time.Millisecond) }

// startLoad starts a watcher and a writer per server and the leader
// sampler. stopLoad stops the writers and the sampler; the watchers
// run until check has compared them.
func (c *faultCluster) startLoad() {
	watchCtx, stopWatchers := context.WithCancel(context.Background())
	c.stopWatchers = stopWatchers
	c.watchers = make([]*faultWatcher, len(c.servers))
	for i := range c.servers {
		c.watchers[i] = &faultWatcher{server: c.servers[i]}
		c.watches.Go(func() {
			c.watchers[i].run(watchCtx, func() kubernetes.Interface {
				if c.servers[i].current() == nil {
					return nil
				}
				return c.watchClients[i]
			})
		})
	}
	runCtx, stopWriters := context.WithCancel(context.Background())
	c.stopWriters = stopWriters
	for i := range c.servers {
		c.writers.Go(func() { faultWriter(runCtx, i, c.servers, c.clients, c.fig) })
	}
	c.begin = time.Now()
	// Leader sampling: no lease may have two servers saying they lead.
	c.writers.Go(func() {
		for runCtx.Err() == nil {
			l := leaders(runCtx, c.servers, c.clients)
			c.leaderMu.Lock()
			c.sampled++
			if len(l) > 0 {
				c.led++
			}
			for lease, who := range l {
				if len(who) > 1 {
					c.overlaps = append(c.overlaps, fmt.Sprintf("%v: %s led by %v at once", c.since(), lease, who))
				}
			}
			c.leaderMu.Unlock()
			select {
			case <-runCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
}

// stopLoad stops the writers and the leader sampler and waits for them.
func (c *faultCluster) stopLoad() {
	c.stopWriters()
	c.writers.Wait()
}

// faultCheck is what the checks after a run found.
type faultCheck struct {
	// final is the test namespace's configmaps after the run (name →
	// resourceVersion), as the database has them.
	final map[string]string
	// served says how a quorum list through each server differs from
	// final, for each that differs: a list is served from the server's
	// watch cache once the cache has caught up with the database, so a
	// cache that missed or invented events answers it wrongly.
	served []string
	// lost are acknowledged writes not in final with the resourceVersion
	// acknowledged.
	lost []string
	// reused are resourceVersions acknowledged or delivered for two
	// different configmaps.
	reused []string
	// unequal are the watchers whose view did not come to equal final.
	unequal []string
	// disorder are events out of order or repeated, per watcher.
	disorder []string
	relists  int
	events   int
	// late are configmaps the database got after its first read, none
	// acknowledged (see check).
	late int
}

// dbConfigMaps reads the test namespace's configmaps (name →
// resourceVersion) from the datastore's own table, bypassing every
// server: what the database has, whatever the servers serve.
func dbConfigMaps(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	const prefix = "/registry/configmaps/" + faultNamespace + "/"
	rows, err := db.Query(`SELECT name, mod_revision FROM kv_current WHERE substring(name from 1 for $1) = $2`, len(prefix), []byte(prefix))
	if err != nil {
		t.Fatalf("read the configmaps from the database: %v", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name []byte
		var rev int64
		if err := rows.Scan(&name, &rev); err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(string(name), prefix)] = strconv.FormatInt(rev, 10)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// check waits for every server to be ready (nobody restarts it), reads
// the test namespace's configmaps from db (the datastore's database),
// and compares with them what every server lists, what the writers were
// told and what every watcher saw; it stops the watchers. It reports
// instead of failing, for the caller to decide (see fail).
func (c *faultCluster) check(t *testing.T, db *sql.DB) *faultCheck {
	t.Helper()
	ctx := context.Background()
	for _, f := range c.servers {
		until(t, commandTimeout, f.name+" ready after the faults", func() (bool, error) {
			code, _, err := f.current().readyz(t)
			return code == 200, err
		})
	}
	// A writer stopped mid-request may still have its create committed
	// (the store checks a request's context only when the batch that
	// commits it begins, as etcd commits a proposal whose client went
	// away), after a first read of the database: the database is read
	// again until every watcher agrees with it, and what landed late
	// (never acknowledged) is counted.
	first := dbConfigMaps(t, db)
	r := &faultCheck{final: first}
	c.fig.mu.Lock()
	byRV := map[int64]string{}
	for _, a := range c.fig.writes {
		if have := r.final[a.name]; have != strconv.FormatInt(a.rv, 10) {
			r.lost = append(r.lost, fmt.Sprintf("%s (resourceVersion %d) is %q after the run", a.name, a.rv, have))
		}
		if other, ok := byRV[a.rv]; ok && other != a.name {
			r.reused = append(r.reused, fmt.Sprintf("resourceVersion %d acknowledged for %s and %s", a.rv, other, a.name))
		}
		byRV[a.rv] = a.name
	}
	c.fig.mu.Unlock()
	for i, w := range c.watchers {
		deadline := time.Now().Add(commandTimeout)
		for {
			r.final = dbConfigMaps(t, db)
			w.mu.Lock()
			same := mapsEqual(w.view, r.final)
			w.mu.Unlock()
			if same {
				break
			}
			if time.Now().After(deadline) {
				r.unequal = append(r.unequal, fmt.Sprintf("the watcher on %s did not see every configmap within %v: %s", w.server.name, commandTimeout, w.diff(r.final)))
				if s := w.server.current(); s != nil {
					t.Logf("%s's warnings and errors:\n%s", w.server.name, warnings(s.logs()))
				}
				// What the server itself serves, from its cache and
				// from the database.
				for _, rv := range []string{"0", ""} {
					l, err := c.clientsets[i].CoreV1().ConfigMaps(faultNamespace).List(ctx, metav1.ListOptions{ResourceVersion: rv})
					if err == nil {
						t.Logf("%s lists %d configmaps at resourceVersion %s (asked %q)", w.server.name, len(l.Items), l.ResourceVersion, rv)
					}
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for name := range r.final {
		if _, ok := first[name]; !ok {
			r.late++
		}
	}
	for i, f := range c.servers {
		list, err := c.clientsets[i].CoreV1().ConfigMaps(faultNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		served := map[string]string{}
		for _, cm := range list.Items {
			served[cm.Name] = cm.ResourceVersion
		}
		if !mapsEqual(served, r.final) {
			r.served = append(r.served, fmt.Sprintf("%s lists %d configmaps at resourceVersion %s, the database has %d: %s",
				f.name, len(served), list.ResourceVersion, len(r.final), mapDiff(served, r.final)))
		}
	}
	c.stopWatchers()
	c.watches.Wait()
	for _, w := range c.watchers {
		r.relists += w.relists
		r.events += w.events
		if len(w.violations) > 0 {
			r.disorder = append(r.disorder, fmt.Sprintf("watcher on %s: %d events out of order or repeated, first: %v", w.server.name, len(w.violations), w.violations[:min(5, len(w.violations))]))
		}
		for rv, name := range w.byRV {
			if other, ok := byRV[rv]; ok && other != name {
				r.reused = append(r.reused, fmt.Sprintf("resourceVersion %d is %s's to the watcher on %s, %s's elsewhere", rv, name, w.server.name, other))
			}
			byRV[rv] = name
		}
	}
	return r
}

// fences counts the times a server found that the database had lost
// revisions it had seen, and fenced them off (etcdshim/sqlstore/fence.go),
// in the logs of every run of every server.
func (c *faultCluster) fences() int {
	n := 0
	for _, f := range c.servers {
		f.mu.Lock()
		logs := slices.Clone(f.logs)
		s := f.cur
		f.mu.Unlock()
		if s != nil {
			logs = append(logs, s.logs())
		}
		for _, l := range logs {
			n += strings.Count(l, "fenced off lost revisions")
		}
	}
	return n
}

// fail fails the test for each thing the check found, for two leaders at
// once, and for a fence: the database lost nothing.
func (c *faultCluster) fail(t *testing.T, r *faultCheck) {
	t.Helper()
	if n := c.fences(); n > 0 {
		t.Errorf("servers fenced off lost revisions %d times, though the database lost none", n)
	}
	for _, l := range r.lost[:min(10, len(r.lost))] {
		t.Errorf("acknowledged write %s", l)
	}
	if len(r.lost) > 0 {
		t.Errorf("%d of %d acknowledged writes lost", len(r.lost), len(c.fig.writes))
	}
	for _, s := range r.reused[:min(10, len(r.reused))] {
		t.Errorf("a resourceVersion was reused: %s", s)
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
	c.leaderMu.Lock()
	defer c.leaderMu.Unlock()
	if c.led == 0 {
		t.Errorf("none of %d leader samples found a server leading a lease: they could not have found two", c.sampled)
	}
	if len(c.overlaps) > 0 {
		t.Errorf("%d of %d leader samples had two leaders: %v", len(c.overlaps), c.sampled, c.overlaps[:min(5, len(c.overlaps))])
		for _, f := range c.servers {
			t.Logf("%s's leader election log:\n%s", f.name, f.electionLog())
		}
	}
}
