package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/sqlkube/sqlkube/bench/cluster"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/internal/testbin"
	"github.com/sqlkube/sqlkube/tenant"
)

// TestHost_CrashRecovery kills `sqlkube host`, a process of its own,
// with SIGKILL at every step of a tenant's create and of its delete
// (tenant.CrashEnv: the host kills itself when it reaches the step, so
// the point is exact), and checks that the host started again finishes
// the job: the half-made tenant Ready, on the port it was given,
// answering client-go through the kubeconfig in its Secret; the
// half-deleted one gone entirely (the Tenant, its Secrets, its files,
// on PostgreSQL its schema and role, its port). On SQLite tenants and on
// PostgreSQL's shared-pool ones.
//
// The crash points run one after another on one host directory: the
// host started again after crash N, which finishes N's tenant, is armed
// for crash N+1, on another tenant.
func TestHost_CrashRecovery(t *testing.T) {
	bin, err := testbin.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range sqltest.Backends() {
		switch b.Name {
		case sqltest.SQLite:
			t.Run("sqlite", func(t *testing.T) { testCrashRecovery(t, bin, "", "") })
		case sqltest.Postgres:
			t.Run("postgres", func(t *testing.T) {
				dsn := b.NewDSN(t)
				suffix := strings.ToLower(rand.Text()[:6])
				dropTenantRoles(t, dsn, suffix)
				testCrashRecovery(t, bin, dsn, suffix)
			})
		}
	}
}

// crashHost is `sqlkube host` run as a process on one data directory,
// again after each crash.
type crashHost struct {
	bin, dir, dsn string
	runs          int
	p             *cluster.Process
	log           string // the current run's
	tenants       dynamic.ResourceInterface
	cs            kubernetes.Interface
}

// start runs the host, armed to crash at crashAt ("STEP/TENANT"; "":
// nowhere), and waits until it takes Tenants.
func (h *crashHost) start(t *testing.T, crashAt string) {
	t.Helper()
	h.runs++
	h.log = filepath.Join(h.dir, fmt.Sprintf("host-%02d.log", h.runs))
	args := []string{"host", "--data-dir", h.dir, "--secure-port", "0", "--tenant-ports", "0",
		"--tenant-bind-address", "127.0.0.1", "--log-level", "info"}
	if h.dsn != "" {
		args = append(args, "--tenant-datastore", h.dsn, "--tenant-datastore-max-conns", "6")
	}
	// The child inherits the test's environment.
	t.Setenv(tenant.CrashEnv, crashAt)
	p, err := cluster.StartUntil(context.Background(), "sqlkube host", h.bin, args, h.log, "Tenants: sqlkube tenant create", 2*time.Minute)
	if err != nil {
		t.Fatalf("%v%s", err, h.logTail())
	}
	h.p = p
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(h.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 30 * time.Second
	h.tenants = dynamic.NewForConfigOrDie(cfg).Resource(tenant.GVR)
	h.cs = kubernetes.NewForConfigOrDie(cfg)
}

// crashed waits until the host has killed itself at its crash point.
func (h *crashHost) crashed(t *testing.T, step string) {
	t.Helper()
	select {
	case err := <-h.p.Done():
		_ = h.p.Stop() // closes its log
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("the host ended with %v, want SIGKILL at %s%s", err, step, h.logTail())
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("the host ended with %v, want SIGKILL at %s%s", err, step, h.logTail())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the host did not reach %s within 2 minutes%s", step, h.logTail())
	}
}

// logTail is the end of the current run's log, for a failure's message
// (the log goes with the test's directory).
func (h *crashHost) logTail() string {
	b, err := os.ReadFile(h.log)
	if err != nil {
		return fmt.Sprintf("\n(the host's log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return "\nthe host's log, its last lines:\n" + strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// stop stops the host with SIGTERM.
func (h *crashHost) stop(t *testing.T) {
	t.Helper()
	if h.p == nil {
		return
	}
	if err := h.p.Stop(); err != nil {
		t.Errorf("sqlkube host: %v%s", err, h.logTail())
	}
	h.p = nil
}

func testCrashRecovery(t *testing.T, bin, dsn, suffix string) {
	ctx := context.Background()
	if suffix == "" {
		suffix = strings.ToLower(rand.Text()[:6])
	}
	h := &crashHost{bin: bin, dir: t.TempDir(), dsn: dsn}
	t.Cleanup(func() { h.stop(t) })

	// A create crash point on a tenant of its own, then a delete crash
	// point on that tenant (while there are some).
	type point struct{ op, step, name string }
	var plan []point
	for i, step := range tenant.CreateCrashSteps {
		name := fmt.Sprintf("c%d-%s", i, suffix)
		plan = append(plan, point{"create", step, name})
		if i < len(tenant.DeleteCrashSteps) {
			plan = append(plan, point{"delete", tenant.DeleteCrashSteps[i], name})
		}
	}
	arm := func(i int) string {
		if i >= len(plan) {
			return ""
		}
		return plan[i].step + "/" + plan[i].name
	}
	h.start(t, arm(0))
	var left []string // made, not deleted
	for i, pt := range plan {
		if !t.Run(pt.op+"/"+pt.step, func(t *testing.T) {
			var port int // the deleted tenant's
			if pt.op == "delete" {
				tn, err := getTenant(ctx, h.tenants, pt.name)
				if err != nil {
					t.Fatal(err)
				}
				port = tn.Status.Port
			}
			begin := time.Now()
			switch pt.op {
			case "create":
				u, err := tenant.ToUnstructured(&tenant.Tenant{ObjectMeta: metav1.ObjectMeta{Name: pt.name}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.tenants.Create(ctx, u, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				left = append(left, pt.name)
			case "delete":
				if err := h.tenants.Delete(ctx, pt.name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			h.crashed(t, pt.step)
			crashed := time.Since(begin)
			h.start(t, arm(i+1))
			switch pt.op {
			case "create":
				checkTenantServes(t, h, pt.name)
			case "delete":
				checkTenantGone(t, h, pt.name, port)
				left = left[:len(left)-1]
			}
			t.Logf("crashed %.1f s after the %s; finished %.1f s after the crash", crashed.Seconds(), pt.op, (time.Since(begin) - crashed).Seconds())
		}) {
			t.FailNow() // the next points need this one's host
		}
	}
	// The rest go without a crash, as thoroughly.
	for _, name := range left {
		tn, err := getTenant(ctx, h.tenants, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.tenants.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		checkTenantGone(t, h, name, tn.Status.Port)
	}
	h.stop(t)
}

// checkTenantServes fails the test unless tenant name becomes Ready and
// answers client-go (a list, a write) through the admin kubeconfig of its
// Secret, at its status's endpoint, with its token's Secret beside it.
func checkTenantServes(t *testing.T, h *crashHost, name string) {
	t.Helper()
	ctx := context.Background()
	tn, err := waitPhase(ctxTimeout(t, 2*time.Minute), h.tenants, name, tenant.PhaseReady)
	if err != nil {
		t.Fatalf("%v%s", err, h.logTail())
	}
	if !hasString(tn.Finalizers, tenant.Finalizer) {
		t.Errorf("tenant %s: finalizers %v, want %s", name, tn.Finalizers, tenant.Finalizer)
	}
	// What checkTenantGone looks for on a deleted tenant's port.
	if _, ok := h.tenantCert(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(tn.Status.Port))); !ok {
		t.Errorf("tenant %s's port %d serves no certificate of its own", name, tn.Status.Port)
	}
	secrets := h.cs.CoreV1().Secrets(tenant.Namespace)
	if _, err := secrets.Get(ctx, name+"-token", metav1.GetOptions{}); err != nil {
		t.Errorf("tenant %s's token Secret: %v", name, err)
	}
	s, err := secrets.Get(ctx, tn.Status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("tenant %s's kubeconfig Secret %q: %v", name, tn.Status.KubeconfigSecret, err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, s.Data["kubeconfig"], 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != tn.Status.Endpoint || !strings.HasSuffix(cfg.Host, ":"+strconv.Itoa(tn.Status.Port)) {
		t.Errorf("tenant %s: kubeconfig server %s, status endpoint %s and port %d", name, cfg.Host, tn.Status.Endpoint, tn.Status.Port)
	}
	cs := tenantClient(t, kc)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("tenant %s: %v", name, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-crash"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant %s: a write: %v", name, err)
	}
	if h.dsn != "" {
		if schema, role := pgTenantObjects(t, h.dsn, name); !schema || !role {
			t.Errorf("tenant %s on PostgreSQL: schema %v, role %v; want both", name, schema, role)
		}
	}
}

// checkTenantGone fails the test unless tenant name and everything of it
// go: the Tenant (its finalizer removed), its Secrets, its files, its
// schema and role on PostgreSQL, and its port.
func checkTenantGone(t *testing.T, h *crashHost, name string, port int) {
	t.Helper()
	ctx := context.Background()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := getTenant(ctx, h.tenants, name)
		lastErr = err
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("tenant %s is not gone: %v%s", name, lastErr, h.logTail())
	}
	secrets, err := h.cs.CoreV1().Secrets(tenant.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, name+"-") {
			t.Errorf("tenant %s's Secret %s is still there", name, s.Name)
		}
	}
	if _, err := os.Stat(filepath.Join(h.dir, "tenants", name)); !os.IsNotExist(err) {
		t.Errorf("tenant %s's files are still there: %v", name, err)
	}
	if h.dsn != "" {
		if schema, role := pgTenantObjects(t, h.dsn, name); schema || role {
			t.Errorf("tenant %s on PostgreSQL: schema left %v, role left %v", name, schema, role)
		}
	}
	if port != 0 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
			c.Close()
			// The OS may have given the freed port to one of the
			// restarted host's own listeners, which ask for port 0 too:
			// that one is not the tenant's if it is not a TLS server
			// with a certificate of its own CA.
			if subject, ok := h.tenantCert(t, addr); ok {
				t.Errorf("tenant %s's port %d still takes connections, with a certificate for %q", name, port, subject)
			}
		}
	}
}

// tenantCert reports whether addr serves TLS with a certificate that the
// host's CA did not sign (a tenant's), and its subject.
func (h *crashHost) tenantCert(t *testing.T, addr string) (string, bool) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(h.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	ca := cfg.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	roots, err := certutil.NewPoolFromBytes(ca)
	if err != nil {
		t.Fatalf("the host's CA: %v", err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // verified below, without a name
	if err != nil {
		return "", false
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots}); err == nil {
		return "", false
	}
	return leaf.Subject.String(), true
}

// pgTenantObjects reports whether tenant name's schema and role exist
// on dsn's server.
func pgTenantObjects(t *testing.T, dsn, name string) (schema, role bool) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := "tenant_" + strings.ReplaceAll(name, "-", "_")
	if err := db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, n).Scan(&schema, &role); err != nil {
		t.Fatal(err)
	}
	return schema, role
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
