// Package tenants measures many clusters on one PostgreSQL: a `sqlkube
// host` with N tenants on the machine's PostgreSQL (RunHost), and, for
// comparison, one `sqlkube server` per cluster until PostgreSQL runs out
// of connections (RunServers). Both run the sqlkube binary as a child
// process, in a database of their own that they drop afterwards, with the
// tenants' roles.
package tenants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/bench/cluster"
	"github.com/sqlkube/sqlkube/tenant"
)

// Options configure a run.
type Options struct {
	// Binary is the sqlkube executable to run.
	Binary string
	// AdminDSN reaches the PostgreSQL server as a user that may create
	// databases and roles; the run makes a database of its own there.
	AdminDSN string
	// Tenants is how many tenants (RunHost) or servers at most
	// (RunServers) to start.
	Tenants int
	// Settle is how long the clusters are left before the idle window,
	// Idle the window itself.
	Settle, Idle time.Duration
	// Wakes is how many tenants are suspended and then woken by a request.
	Wakes int
	// MaxConns is the host's --tenant-datastore-max-conns.
	MaxConns int
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// Result is what a run measured.
type Result struct {
	// Clusters is how many clusters were ready and answered.
	Clusters int
	// Ready is each cluster's create → ready, sorted.
	Ready []time.Duration
	// BaseRSS is the host's RSS before the first tenant, RSS after the
	// idle window (RunHost); for RunServers, RSS is all servers' together.
	BaseRSS, RSS int64
	// CPU is the processes' CPU over the idle window, in cores.
	CPU float64
	// Tx is PostgreSQL transactions per second in the run's database over
	// the idle window (RunServers: all its databases).
	Tx float64
	// MaxConns is the most connections to the run's database(s) seen in
	// any sample; Conns the count at the end of the idle window.
	MaxConns, Conns int
	// Wake is each woken tenant's first request until answered, sorted.
	Wake []time.Duration
	// Failure is why RunServers stopped adding servers.
	Failure string
}

// PerCluster is the RSS each cluster added, in bytes.
func (r Result) PerCluster() int64 {
	if r.Clusters == 0 {
		return 0
	}
	return (r.RSS - r.BaseRSS) / int64(r.Clusters)
}

// TxPerCluster is Tx per cluster.
func (r Result) TxPerCluster() float64 {
	if r.Clusters == 0 {
		return 0
	}
	return r.Tx / float64(r.Clusters)
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// pgServer is the run's view of the PostgreSQL server.
type pgServer struct {
	admin  *sql.DB
	dsn    *url.URL
	prefix string // of the databases and tenants this run makes
}

func openPG(ctx context.Context, adminDSN string) (*pgServer, error) {
	u, err := url.Parse(adminDSN)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("tenants: --datastore %q: want postgres://USER@HOST:PORT/DB", adminDSN)
	}
	db, err := sql.Open("pgx", adminDSN)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("tenants: PostgreSQL at %s: %w", u.Host, err)
	}
	return &pgServer{admin: db, dsn: u, prefix: fmt.Sprintf("b%04x", os.Getpid()&0xffff)}, nil
}

// createDB makes a database and returns its DSN.
func (p *pgServer) createDB(ctx context.Context, name string) (string, error) {
	if _, err := p.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	u := *p.dsn
	u.Path = "/" + name
	return u.String(), nil
}

// dropAll drops the run's databases and the tenants' roles (roles are
// the server's, not a database's).
func (p *pgServer) dropAll(ctx context.Context) error {
	var errs []error
	names := func(q string) []string {
		rows, err := p.admin.QueryContext(ctx, q, p.prefix+"%")
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var n string
			if rows.Scan(&n) == nil {
				out = append(out, n)
			}
		}
		return out
	}
	for _, db := range names(`SELECT datname FROM pg_database WHERE datname LIKE $1`) {
		if _, err := p.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			errs = append(errs, err)
		}
	}
	for _, role := range names(`SELECT rolname FROM pg_roles WHERE rolname LIKE 'tenant_' || $1`) {
		if _, err := p.admin.ExecContext(ctx, `DROP ROLE IF EXISTS "`+role+`"`); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stats reads the transactions committed or rolled back so far and the
// open connections of the run's databases.
func (p *pgServer) stats(ctx context.Context) (tx int64, conns int, err error) {
	// pg_stat_database is a snapshot per transaction: a fresh one each call.
	if err = p.admin.QueryRowContext(ctx, `SELECT COALESCE(sum(xact_commit + xact_rollback), 0) FROM pg_stat_database WHERE datname LIKE $1`, p.prefix+"%").Scan(&tx); err != nil {
		return 0, 0, err
	}
	err = p.admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname LIKE $1`, p.prefix+"%").Scan(&conns)
	return tx, conns, err
}

// start runs the binary with args (bench/cluster's Process: its output
// to logPath) and waits until a line of its standard output contains
// marker.
func start(ctx context.Context, binary, logPath, marker string, timeout time.Duration, args ...string) (*cluster.Process, error) {
	return cluster.StartUntil(ctx, filepath.Base(binary), binary, args, logPath, marker, timeout)
}

// idleWindow samples the processes' CPU, and PostgreSQL's transactions
// and connections, over d.
type idleWindow struct {
	cpu      float64
	tx       float64
	maxConns int
	conns    int
}

func measureIdle(ctx context.Context, pg *pgServer, d time.Duration, pids ...int) (idleWindow, error) {
	var w idleWindow
	cpu := func() (time.Duration, error) {
		var sum time.Duration
		for _, pid := range pids {
			c, err := cluster.CPUTime(pid)
			if err != nil {
				return 0, err
			}
			sum += c
		}
		return sum, nil
	}
	cpu0, err := cpu()
	if err != nil {
		return w, err
	}
	tx0, conns, err := pg.stats(ctx)
	if err != nil {
		return w, err
	}
	w.maxConns = conns
	begin := time.Now()
	for time.Since(begin) < d {
		if err := cluster.Sleep(ctx, min(5*time.Second, d-time.Since(begin))); err != nil {
			return w, err
		}
		_, c, err := pg.stats(ctx)
		if err != nil {
			return w, err
		}
		w.maxConns = max(w.maxConns, c)
	}
	elapsed := time.Since(begin)
	cpu1, err := cpu()
	if err != nil {
		return w, err
	}
	tx1, conns, err := pg.stats(ctx)
	if err != nil {
		return w, err
	}
	w.conns = conns
	w.maxConns = max(w.maxConns, conns)
	w.cpu = (cpu1 - cpu0).Seconds() / elapsed.Seconds()
	// The stats query itself runs in the admin database, not counted.
	w.tx = float64(tx1-tx0) / elapsed.Seconds()
	return w, nil
}

// RunHost starts a `sqlkube host` whose tenants live in a new database on
// the PostgreSQL server, creates o.Tenants tenants one after another
// (each create → Ready, then a list through its own kubeconfig), leaves
// them idle, and suspends and wakes o.Wakes of them.
func RunHost(ctx context.Context, o Options) (res Result, err error) {
	pg, err := openPG(ctx, o.AdminDSN)
	if err != nil {
		return res, err
	}
	defer pg.admin.Close()
	defer func() {
		if derr := pg.dropAll(context.Background()); derr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up PostgreSQL: %w", derr))
		}
	}()
	dsn, err := pg.createDB(ctx, pg.prefix+"_host")
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "sqlkube-bench-tenants-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	host, err := start(ctx, o.Binary, filepath.Join(os.TempDir(), pg.prefix+"-host.log"), "Tenants: sqlkube tenant create", 2*time.Minute,
		"host", "--data-dir", filepath.Join(dir, "host"), "--secure-port", "0", "--tenant-ports", "0",
		"--tenant-datastore", dsn, "--tenant-datastore-max-conns", fmt.Sprint(o.MaxConns), "--log-level", "warn")
	if err != nil {
		return res, err
	}
	defer host.Stop() //nolint:errcheck // the run's figures are taken
	pid := host.Pid()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "host", "kubeconfig"))
	if err != nil {
		return res, err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	tenants := dyn.Resource(tenant.GVR)
	if err := cluster.Sleep(ctx, 5*time.Second); err != nil {
		return res, err
	}
	if res.BaseRSS, err = cluster.RSS(pid); err != nil {
		return res, err
	}

	// One watch sees every tenant reach its phases.
	phases := newPhaseWatch()
	w, err := tenants.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	defer w.Stop()
	go phases.follow(w)

	names := make([]string, o.Tenants)
	for i := range names {
		names[i] = fmt.Sprintf("%s-t%03d", pg.prefix, i+1)
		t := &tenant.Tenant{ObjectMeta: metav1.ObjectMeta{Name: names[i]}}
		u, err := tenant.ToUnstructured(t)
		if err != nil {
			return res, err
		}
		begin := time.Now()
		if _, err := tenants.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("creating tenant %d: %w", i+1, err)
		}
		at, err := phases.wait(ctx, names[i], tenant.PhaseReady, 2*time.Minute)
		if err != nil {
			return res, err
		}
		res.Ready = append(res.Ready, at.Sub(begin))
		if (i+1)%10 == 0 {
			rss, _ := cluster.RSS(pid)
			o.logf("%d tenants ready (last: %v); host RSS %.0f MiB", i+1, at.Sub(begin).Round(time.Millisecond), float64(rss)/(1<<20))
		}
	}
	// Every tenant answers a list through its own admin kubeconfig.
	clients := make([]kubernetes.Interface, len(names))
	for i, name := range names {
		tc, err := tenantClient(ctx, cs, name)
		if err != nil {
			return res, err
		}
		clients[i] = tc
		if _, err := tc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			return res, fmt.Errorf("tenant %s does not answer: %w", name, err)
		}
		res.Clusters++
	}
	o.logf("%d tenants ready and answering; settling %v, then idle for %v", res.Clusters, o.Settle, o.Idle)
	if err := cluster.Sleep(ctx, o.Settle); err != nil {
		return res, err
	}
	idle, err := measureIdle(ctx, pg, o.Idle, pid)
	if err != nil {
		return res, err
	}
	res.CPU, res.Tx, res.MaxConns, res.Conns = idle.cpu, idle.tx, idle.maxConns, idle.conns
	if res.RSS, err = cluster.RSS(pid); err != nil {
		return res, err
	}

	// Suspend some, then wake each with one request.
	for i := 0; i < o.Wakes && i < len(names); i++ {
		name := names[i]
		patch := []byte(`{"spec":{"suspended":true}}`)
		if _, err := tenants.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return res, err
		}
		if _, err := phases.wait(ctx, name, tenant.PhaseSuspended, time.Minute); err != nil {
			return res, err
		}
		begin := time.Now()
		if _, err := clients[i].CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			return res, fmt.Errorf("waking tenant %s: %w", name, err)
		}
		res.Wake = append(res.Wake, time.Since(begin))
	}
	slices.Sort(res.Ready)
	slices.Sort(res.Wake)
	return res, nil
}

// tenantClient is a client of the tenant's API from its admin kubeconfig
// Secret.
func tenantClient(ctx context.Context, cs kubernetes.Interface, name string) (kubernetes.Interface, error) {
	s, err := cs.CoreV1().Secrets(tenant.Namespace).Get(ctx, name+"-kubeconfig", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("tenant %s's kubeconfig: %w", name, err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["kubeconfig"])
	if err != nil {
		return nil, err
	}
	cfg.Timeout = time.Minute
	return kubernetes.NewForConfig(cfg)
}

// phaseWatch records when each tenant was first seen in each phase.
type phaseWatch struct {
	mu      sync.Mutex
	changed *sync.Cond
	seen    map[string]map[string]time.Time // name → phase → first seen
	err     error
}

func newPhaseWatch() *phaseWatch {
	p := &phaseWatch{seen: map[string]map[string]time.Time{}}
	p.changed = sync.NewCond(&p.mu)
	return p
}

func (p *phaseWatch) follow(w watch.Interface) {
	for ev := range w.ResultChan() {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		t, err := tenant.FromUnstructured(u)
		if err != nil || t.Status.ObservedGeneration != t.Generation {
			continue
		}
		now := time.Now()
		p.mu.Lock()
		if p.seen[t.Name] == nil {
			p.seen[t.Name] = map[string]time.Time{}
		}
		if _, ok := p.seen[t.Name][t.Status.Phase]; !ok {
			p.seen[t.Name][t.Status.Phase] = now
		}
		if t.Status.Phase == tenant.PhaseReady {
			// A later suspend is waited for afresh.
			delete(p.seen[t.Name], tenant.PhaseSuspended)
		}
		p.mu.Unlock()
		p.changed.Broadcast()
	}
	p.mu.Lock()
	p.err = errors.New("the watch of tenants ended")
	p.mu.Unlock()
	p.changed.Broadcast()
}

// wait waits until name has been seen in phase and returns when.
func (p *phaseWatch) wait(ctx context.Context, name, phase string, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, p.changed.Broadcast)
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if at, ok := p.seen[name][phase]; ok {
			return at, nil
		}
		if p.err != nil {
			return time.Time{}, p.err
		}
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("tenant %s not %s within %v", name, phase, timeout)
		}
		p.changed.Wait()
	}
}

// RunServers starts `sqlkube server --disable-node --disable-dns`, each
// in a database of its own, one after another, until o.Tenants serve or
// one does not (PostgreSQL refusing connections, as a rule); then
// measures them idle.
func RunServers(ctx context.Context, o Options) (res Result, err error) {
	pg, err := openPG(ctx, o.AdminDSN)
	if err != nil {
		return res, err
	}
	defer pg.admin.Close()
	dir, err := os.MkdirTemp("", "sqlkube-bench-servers-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	var procs []*cluster.Process
	defer func() {
		for _, p := range procs {
			_ = p.Stop()
		}
		if derr := pg.dropAll(context.Background()); derr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up PostgreSQL: %w", derr))
		}
	}()
	var pids []int
	for i := range o.Tenants {
		dsn, err := pg.createDB(ctx, fmt.Sprintf("%s_s%03d", pg.prefix, i+1))
		if err != nil {
			res.Failure = err.Error()
			break
		}
		data := filepath.Join(dir, fmt.Sprint(i+1))
		begin := time.Now()
		p, err := start(ctx, o.Binary, filepath.Join(os.TempDir(), fmt.Sprintf("%s-server-%d.log", pg.prefix, i+1)), "Kubernetes API on", time.Minute,
			"server", "--datastore", dsn, "--data-dir", data, "--secure-port", "0", "--disable-node", "--disable-dns", "--log-level", "warn",
			"--kube-controller-manager-arg=--secure-port=0", "--kube-scheduler-arg=--secure-port=0")
		if err != nil {
			res.Failure = fmt.Sprintf("server %d: %v", i+1, err)
			break
		}
		procs = append(procs, p)
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(data, "kubeconfig"))
		if err != nil {
			return res, err
		}
		if err := answers(ctx, cfg); err != nil {
			res.Failure = fmt.Sprintf("server %d: %v", i+1, err)
			break
		}
		res.Ready = append(res.Ready, time.Since(begin))
		pids = append(pids, p.Pid())
		res.Clusters++
		o.logf("%d servers ready (last: %v)", res.Clusters, time.Since(begin).Round(time.Millisecond))
	}
	if res.Clusters == 0 {
		return res, fmt.Errorf("no server started: %s", res.Failure)
	}
	// A server that did not start may have left the others short of
	// connections; those that serve are measured as they are.
	if err := cluster.Sleep(ctx, o.Settle); err != nil {
		return res, err
	}
	idle, err := measureIdle(ctx, pg, o.Idle, pids...)
	if err != nil {
		return res, err
	}
	res.CPU, res.Tx, res.MaxConns, res.Conns = idle.cpu, idle.tx, idle.maxConns, idle.conns
	for _, pid := range pids {
		rss, err := cluster.RSS(pid)
		if err != nil {
			return res, err
		}
		res.RSS += rss
	}
	slices.Sort(res.Ready)
	return res, nil
}

// answers lists namespaces through cfg, retrying for a few seconds.
func answers(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	for range 50 {
		if _, last = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); last == nil {
			return nil
		}
		if err := cluster.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return last
}
