package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// The fault test's leader election is faster than upstream's defaults, so
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
	s := launch(t, exec.Command(sqlkubeBin, args...), f.dir)
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
	// writes are the acknowledged writes' times, in the order acknowledged.
	writes []ackedWrite
}

// ackedWrite is when a write was acknowledged and how long it took.
type ackedWrite struct {
	at   time.Time
	took time.Duration
}

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
		begin := time.Now()
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
			fig.writes = append(fig.writes, ackedWrite{at: now, took: now.Sub(begin)})
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
			case watch.Deleted:
				delete(w.view, cm.Name)
			}
			w.mu.Unlock()
		}
		wi.Stop()
	}
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
	dsn := pg.DSN("sqlkube")
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
	servers := make([]*faultServer, 3)
	for i := range servers {
		servers[i] = &faultServer{name: fmt.Sprintf("server-%d", i), dir: t.TempDir(), port: freePort(t),
			// Addresses of a documentation range (TEST-NET-2): an
			// endpoint may not be a loopback address, and nothing here
			// connects to them.
			advertise: fmt.Sprintf("198.51.100.%d", i+2), args: base}
	}
	t.Cleanup(func() {
		for _, f := range servers {
			if s := f.current(); s != nil {
				s.stop(t)
			}
		}
	})
	servers[0].start(t)
	token := filepath.Join(servers[0].dir, "token")
	for _, f := range servers[1:] {
		f.args = append(slices.Clone(base), "--token-file", token)
		f.start(t)
	}
	servers[0].args = append(slices.Clone(base), "--token-file", token)

	// Clients, built once per server from its kubeconfig (the address
	// and identity survive restarts).
	clientsets := make([]kubernetes.Interface, len(servers))
	for i, f := range servers {
		cfg := f.current().restConfig(t, f.current().kubeconfig)
		cfg.QPS, cfg.Burst = 1000, 2000
		cfg.Timeout = 10 * time.Second
		clientsets[i] = kubernetes.NewForConfigOrDie(cfg)
	}
	clients := func(i int) kubernetes.Interface {
		if servers[i].current() == nil {
			return nil
		}
		return clientsets[i]
	}
	// Watches have no client timeout.
	watchClients := make([]kubernetes.Interface, len(servers))
	for i, f := range servers {
		cfg := f.current().restConfig(t, f.current().kubeconfig)
		cfg.QPS, cfg.Burst = 1000, 2000
		watchClients[i] = kubernetes.NewForConfigOrDie(cfg)
	}
	ctx := context.Background()
	if _, err := clientsets[0].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: faultNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	fig := &faultFigures{acked: map[string]string{}}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	watchers := make([]*faultWatcher, len(servers))
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchWG sync.WaitGroup
	for i := range servers {
		watchers[i] = &faultWatcher{server: servers[i]}
		watchWG.Go(func() {
			watchers[i].run(watchCtx, func() kubernetes.Interface {
				if servers[i].current() == nil {
					return nil
				}
				return watchClients[i]
			})
		})
	}
	for i := range servers {
		wg.Go(func() { faultWriter(runCtx, i, servers, clients, fig) })
	}

	begin := time.Now()
	// Leader sampling: no lease may have two servers saying they lead.
	var overlaps []string
	var leaderMu sync.Mutex
	sampled := 0
	wg.Go(func() {
		for runCtx.Err() == nil {
			l := leaders(runCtx, servers, clients)
			leaderMu.Lock()
			sampled++
			for lease, who := range l {
				if len(who) > 1 {
					overlaps = append(overlaps, fmt.Sprintf("%v: %s led by %v at once", time.Since(begin).Round(time.Millisecond), lease, who))
				}
			}
			leaderMu.Unlock()
			select {
			case <-runCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	// The faults.
	pgRestartAt, pauseAt := chaos/3, 2*chaos/3
	pgDone, pauseDone := false, false
	for next := 0; time.Since(begin) < chaos; next++ {
		f := servers[next%len(servers)]
		f.kill()
		fig.kills++
		took := f.start(t)
		fig.recoveries++
		fig.maxRecovery = max(fig.maxRecovery, took)
		t.Logf("%v: killed and restarted %s (serving again after %v)", time.Since(begin).Round(time.Millisecond), f.name, took.Round(time.Millisecond))
		if !pgDone && time.Since(begin) >= pgRestartAt {
			pg.Stop(t, "immediate")
			pg.Start(t)
			fig.pgRestarts++
			pgDone = true
			t.Logf("%v: restarted PostgreSQL", time.Since(begin).Round(time.Millisecond))
		}
		if !pauseDone && time.Since(begin) >= pauseAt {
			// Pause whichever server leads the controller manager.
			if who := leaders(ctx, servers, clients)["kube-controller-manager"]; len(who) == 1 {
				for _, p := range servers {
					if p.name == who[0] {
						s := p.current()
						_ = s.cmd.Process.Signal(syscall.SIGSTOP)
						time.Sleep(faultLeaseDuration + 2*time.Second) // the pause is the fault itself
						_ = s.cmd.Process.Signal(syscall.SIGCONT)
						fig.pauses++
						t.Logf("%v: paused %s (the controller manager's leader) for %v", time.Since(begin).Round(time.Millisecond), p.name, faultLeaseDuration+2*time.Second)
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
	stopRun()
	wg.Wait()

	// Every server recovers by itself: ready, on the same database.
	for _, f := range servers {
		until(t, commandTimeout, f.name+" ready after the faults", func() (bool, error) {
			code, _, err := f.current().readyz(t)
			return code == 200, err
		})
	}
	final, err := clientsets[0].CoreV1().ConfigMaps(faultNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, cm := range final.Items {
		have[cm.Name] = cm.ResourceVersion
	}
	lost := 0
	for name, rv := range fig.acked {
		if have[name] != rv {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged write %s (resourceVersion %s) is %q after the run", name, rv, have[name])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes lost", lost, len(fig.acked))
	}
	for i, w := range watchers {
		deadline := time.Now().Add(commandTimeout)
		for {
			w.mu.Lock()
			same := mapsEqual(w.view, have)
			w.mu.Unlock()
			if same {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the watcher on %s did not see every configmap within %v: %s", w.server.name, commandTimeout, w.diff(have))
				if s := w.server.current(); s != nil {
					t.Logf("%s's warnings and errors:\n%s", w.server.name, warnings(s.logs()))
				}
				// What the server itself serves, from its cache and
				// from the database.
				for _, rv := range []string{"0", ""} {
					l, err := clientsets[i].CoreV1().ConfigMaps(faultNamespace).List(ctx, metav1.ListOptions{ResourceVersion: rv})
					if err == nil {
						t.Logf("%s lists %d configmaps at resourceVersion %s (asked %q)", w.server.name, len(l.Items), l.ResourceVersion, rv)
					}
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stopWatch()
	watchWG.Wait()
	for _, w := range watchers {
		fig.relists += w.relists
		if len(w.violations) > 0 {
			t.Errorf("watcher on %s: %d events out of order or repeated, first: %v", w.server.name, len(w.violations), w.violations[:min(5, len(w.violations))])
		}
	}
	leaderMu.Lock()
	if len(overlaps) > 0 {
		t.Errorf("%d of %d leader samples had two leaders: %v", len(overlaps), sampled, overlaps[:min(5, len(overlaps))])
		for _, f := range servers {
			t.Logf("%s's leader election log:\n%s", f.name, f.electionLog())
		}
	}
	leaderMu.Unlock()

	// The kubernetes Service names exactly the live servers.
	var want []string
	for _, f := range servers {
		want = append(want, f.advertise)
	}
	slices.Sort(want)
	var got []string
	// listsWant reads the kubernetes Endpoints into got and compares.
	listsWant := func() (bool, error) {
		ep, err := clientsets[0].CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
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

	events := 0
	for _, w := range watchers {
		events += w.events
	}
	t.Logf("fault run: %v of faults; %d writes acknowledged of %d attempted (%d failed); %d kills, %d recoveries (longest restart to serving %v); %d PostgreSQL restarts; %d leader pauses; %d watch events over %d watchers, %d relists after 410; longest a writer went without an acknowledged write: %v; %d leader samples, %d with two leaders",
		chaos, len(fig.acked), fig.attempts, fig.failed, fig.kills, fig.recoveries, fig.maxRecovery.Round(time.Millisecond),
		fig.pgRestarts, fig.pauses, events, len(watchers), fig.relists, fig.maxGap.Round(time.Millisecond), sampled, len(overlaps))
	if len(fig.acked) == 0 || fig.kills == 0 {
		t.Errorf("the run proved nothing: %d writes, %d kills", len(fig.acked), fig.kills)
	}
}

// diff says how the watcher's view differs from want.
func (w *faultWatcher) diff(want map[string]string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var missing, extra []string
	for k, v := range want {
		if w.view[k] != v {
			missing = append(missing, k+"@"+v)
		}
	}
	for k, v := range w.view {
		if want[k] != v {
			extra = append(extra, k+"@"+v)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return fmt.Sprintf("last resourceVersion %d, %d events, %d relists; %d missing %v; %d unexpected %v",
		w.lastRV, w.events, w.relists, len(missing), missing[:min(8, len(missing))], len(extra), extra[:min(8, len(extra))])
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
