package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/bench/cluster"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/internal/testbin"
	"github.com/sqlkube/sqlkube/tenant"
)

// haFailover bounds how long a tenant may go unanswered when one of two
// hosts dies (issue 42).
const haFailover = 15 * time.Second

// haHost is one `sqlkube host` process of TestHost_HA, on an address of
// its own.
type haHost struct {
	name, dir, addr string
	args            []string
	p               *cluster.Process
	cfg             *rest.Config
}

// run starts the host (again) with extra flags and waits until it
// takes Tenants.
func (h *haHost) run(t *testing.T, bin string, extra ...string) {
	t.Helper()
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(h.dir, "host.log")
	p, err := cluster.StartUntil(context.Background(), "sqlkube host "+h.name, bin, append(h.args, extra...), log, "Tenants: sqlkube tenant create", 2*time.Minute)
	if err != nil {
		b, _ := os.ReadFile(log)
		t.Fatalf("%v\n%s", err, b)
	}
	h.p = p
	t.Cleanup(func() { _ = p.Stop() })
	if h.cfg, err = clientcmd.BuildConfigFromFlags("", filepath.Join(h.dir, "kubeconfig")); err != nil {
		t.Fatal(err)
	}
	h.cfg.Timeout = 30 * time.Second
}

// identity is the host's identity in the host Lease's election.
func (h *haHost) identity(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "host-identity"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestHost_HA runs two `sqlkube host` processes on one PostgreSQL (the
// Tenant objects in one database, the tenants' data in others): the
// host that holds the host Lease runs the tenants' lifecycle and
// controllers, the other serves every Ready tenant's API beside it, on
// its own address.
//   - Writes go to one tenant through the leading host; it is killed
//     with SIGKILL. Every tenant answers through the other host within
//     haFailover, every acknowledged write is there, and the other host
//     takes over: the tenants' controllers run again, it creates a
//     tenant.
//   - The killed host comes back as the standby, one that does not see
//     what the leader does (tenant.StaleStandbyEnv), and a tenant moves
//     to another database while a client writes through it: every
//     write it acknowledged is in the moved tenant (the old copy is
//     fenced before it is read), none lost in the copy left behind.
//   - The leader deletes every tenant.
func TestHost_HA(t *testing.T) {
	var pg *sqltest.Backend
	for _, b := range sqltest.Backends() {
		if b.Name == sqltest.Postgres {
			pg = &b
		}
	}
	if pg == nil {
		t.Skip("SQLKUBE_TEST_BACKENDS leaves out postgres")
	}
	bin, err := testbin.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hostDSN, tenantsDSN, bigDSN := pg.NewDSN(t), pg.NewDSN(t), pg.NewDSN(t)
	suffix := strings.ToLower(rand.Text()[:6])
	dropTenantRoles(t, tenantsDSN, suffix)
	dropTenantRoles(t, bigDSN, suffix)
	// Two addresses of the loopback: a tenant's port is the same on both.
	newHost := func(name, addr string) *haHost {
		h := &haHost{name: name, dir: filepath.Join(t.TempDir(), name), addr: addr}
		h.args = []string{"host", "--data-dir", h.dir, "--datastore", hostDSN, "--secure-port", "0",
			"--tenant-ports", "0", "--tenant-bind-address", addr, "--disable-tenant-dns",
			"--tenant-datastore", tenantsDSN, "--tenant-datastore", "big=" + bigDSN,
			"--tenant-datastore-max-conns", "8", "--log-level", "info"}
		return h
	}
	one, two := newHost("one", "127.0.0.1"), newHost("two", "127.0.0.2")
	hosts := []*haHost{one, two}
	ctx := ctxTimeout(t, 8*time.Minute)
	// The first leads before the second starts.
	one.run(t, bin)
	waitLeader(t, ctx, one, one)
	token, err := os.ReadFile(filepath.Join(one.dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	two.args = append(two.args, "--token", strings.TrimSpace(string(token)))
	two.run(t, bin)

	tenants := dynamic.NewForConfigOrDie(one.cfg).Resource(tenant.GVR)
	names := []string{"ha-a-" + suffix, "ha-b-" + suffix, "ha-c-" + suffix}
	for _, name := range names {
		u, err := tenant.ToUnstructured(&tenant.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tenants.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Each tenant's admin kubeconfig names the leading host's endpoint;
	// the same credentials reach it through either host.
	kubeconfigs := map[string]*rest.Config{}
	for _, name := range names {
		if _, err := waitPhase(ctxTimeout(t, 2*time.Minute), tenants, name, tenant.PhaseReady); err != nil {
			t.Fatal(err)
		}
		kc := filepath.Join(t.TempDir(), name+".kubeconfig")
		if out, err := tenantCLI(t, one.dir, "kubeconfig", name, "--out", kc); err != nil {
			t.Fatalf("tenant kubeconfig %s: %v\n%s", name, err, out)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 10 * time.Second
		kubeconfigs[name] = cfg
	}
	through := func(h *haHost, name string) *kubernetes.Clientset {
		cfg := rest.CopyConfig(kubeconfigs[name])
		for _, o := range hosts {
			cfg.Host = strings.Replace(cfg.Host, "//"+o.addr+":", "//"+h.addr+":", 1)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	answers := func(h *haHost, name string, within time.Duration) error {
		cs := through(h, name)
		return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		})
	}
	for _, h := range hosts {
		for _, name := range names {
			if err := answers(h, name, time.Minute); err != nil {
				t.Fatalf("tenant %s is not served through host %s", name, h.name)
			}
		}
	}

	// Writes through the leading host, until it dies.
	w := startWriter(through(one, names[0]))
	w.waitAcked(t, ctx, 20)
	if err := syscall.Kill(one.p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-one.p.Done()
	_ = one.p.Stop() // closes its log
	acked := w.stop()
	for _, name := range names {
		if err := answers(two, name, haFailover); err != nil {
			t.Fatalf("tenant %s did not answer through the other host within %s of the kill", name, haFailover)
		}
	}
	t.Logf("every tenant answered through the other host %s after the kill", time.Since(killed).Round(time.Millisecond))
	checkAcked(t, ctx, through(two, names[0]), acked, "acknowledged through the killed host")

	// The other host takes the Lease over: the tenants' controllers run
	// again (a new namespace gets its default service account), and it
	// makes tenants.
	waitLeader(t, ctx, two, two)
	t.Logf("the other host leads %s after the kill", time.Since(killed).Round(time.Millisecond))
	cs := through(two, names[1])
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after-failover"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("after-failover").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("the tenant's controllers did not run again on the other host")
	}
	extra := "ha-d-" + suffix
	if out, err := tenantCLI(t, two.dir, "create", extra, "--out", filepath.Join(t.TempDir(), "d.kubeconfig")); err != nil {
		t.Fatalf("tenant create on the other host: %v\n%s", err, out)
	}

	// The killed host comes back, stands by, and does not see the move.
	t.Setenv(tenant.StaleStandbyEnv, "1") // the child's environment
	one.run(t, bin)
	if err := os.Unsetenv(tenant.StaleStandbyEnv); err != nil {
		t.Fatal(err)
	}
	moved := names[2]
	if err := answers(one, moved, time.Minute); err != nil {
		t.Fatalf("tenant %s is not served through the restarted host", moved)
	}
	tenants = dynamic.NewForConfigOrDie(two.cfg).Resource(tenant.GVR)
	w = startWriter(through(one, moved))
	w.waitAcked(t, ctx, 10)
	if _, err := tenants.Patch(ctx, moved, types.MergePatchType, []byte(`{"spec":{"datastore":"big"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		tn, err := getTenant(ctx, tenants, moved)
		return err == nil && tn.Status.Datastore == "big" && tn.Status.Phase == tenant.PhaseReady, nil
	})
	if err != nil {
		t.Fatal("the tenant did not move")
	}
	// The stale standby writes on (refused) a while after the move.
	w.keepOn(t, ctx, 20)
	acked = w.stop()
	checkAcked(t, ctx, through(two, moved), acked, "acknowledged by the stale standby around the move")
	if err := one.p.Stop(); err != nil {
		t.Errorf("the restarted host: %v", err)
	}

	// The leader deletes them all.
	for _, name := range append(names, extra) {
		if out, err := tenantCLI(t, two.dir, "delete", name); err != nil {
			t.Fatalf("tenant delete %s: %v\n%s", name, err, out)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := tenants.List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		t.Fatal("the tenants were not deleted")
	}
}

// waitLeader waits until the host Lease, read through via's API, is
// held by want.
func waitLeader(t *testing.T, ctx context.Context, via, want *haHost) {
	t.Helper()
	leases := kubernetes.NewForConfigOrDie(via.cfg).CoordinationV1().Leases("kube-system")
	id := want.identity(t)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, tenant.LeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == id, nil
	})
	if err != nil {
		t.Fatalf("host %s did not take the host Lease", want.name)
	}
}

// haWriter creates ConfigMaps through one client until stopped, keeping
// the names of those the API acknowledged.
type haWriter struct {
	mu       sync.Mutex
	acked    []string
	attempts int
	quit     chan struct{}
	done     sync.WaitGroup
}

func startWriter(cs kubernetes.Interface) *haWriter {
	w := &haWriter{quit: make(chan struct{})}
	w.done.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%04d", i)}}
			_, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), cm, metav1.CreateOptions{})
			w.mu.Lock()
			w.attempts++
			if err == nil {
				w.acked = append(w.acked, cm.Name)
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(20 * time.Millisecond) // refused or unreachable: no busy loop
			}
		}
	})
	return w
}

// waitAcked waits until n writes were acknowledged.
func (w *haWriter) waitAcked(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.acked) >= n, nil
	})
	if err != nil {
		t.Fatalf("fewer than %d writes acknowledged", n)
	}
}

// keepOn waits until the writer has tried n more writes.
func (w *haWriter) keepOn(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	w.mu.Lock()
	until := w.attempts + n
	w.mu.Unlock()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.attempts >= until, nil
	})
	if err != nil {
		t.Fatalf("the writer did not try %d more writes", n)
	}
}

// stop stops writing and returns what was acknowledged.
func (w *haWriter) stop() []string {
	close(w.quit)
	w.done.Wait()
	return w.acked
}

// checkAcked fails for each of the acknowledged ConfigMaps cs lacks.
func checkAcked(t *testing.T, ctx context.Context, cs kubernetes.Interface, acked []string, what string) {
	t.Helper()
	var list *corev1.ConfigMapList
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		list, err = cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("listing the ConfigMaps %s: not served", what)
	}
	have := map[string]bool{}
	for _, cm := range list.Items {
		have[cm.Name] = true
	}
	missing := 0
	for _, name := range acked {
		if !have[name] {
			t.Errorf("ConfigMap %s, %s, is missing", name, what)
			missing++
		}
	}
	if missing == 0 {
		t.Logf("%d writes %s, all there", len(acked), what)
	}
}
