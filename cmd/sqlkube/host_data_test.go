package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/tenant"
)

func TestParseTenantDatastore(t *testing.T) {
	for _, tc := range []struct{ in, name, dsn string }{
		{"postgres://u@h/db?sslmode=disable", "", "postgres://u@h/db?sslmode=disable"},
		{"pg2=postgres://u@h/db?sslmode=disable&x=y", "pg2", "postgres://u@h/db?sslmode=disable&x=y"},
		{"Bad_Name=postgres://h/db", "", "Bad_Name=postgres://h/db"},
	} {
		if name, dsn := parseTenantDatastore(tc.in); name != tc.name || dsn != tc.dsn {
			t.Errorf("parseTenantDatastore(%q) = %q, %q; want %q, %q", tc.in, name, dsn, tc.name, tc.dsn)
		}
	}
}

// postgresBackend is the machine's PostgreSQL (skipped without one, a
// failure under CI=true when it cannot be reached).
func postgresBackend(t *testing.T) sqltest.Backend {
	t.Helper()
	for _, b := range sqltest.Backends() {
		if b.Name == sqltest.Postgres {
			return b
		}
	}
	t.Skip("SQLKUBE_TEST_BACKENDS leaves out postgres")
	return sqltest.Backend{}
}

// pgQuery runs a query that returns one boolean or number on dsn.
func pgQuery[T any](t *testing.T, dsn, q string, args ...any) T {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v T
	if err := db.QueryRow(q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func pgExec(t *testing.T, dsn, q string) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func hasSchema(t *testing.T, dsn, schema string) bool {
	t.Helper()
	return pgQuery[bool](t, dsn, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema)
}

func hasRole(t *testing.T, role string) bool {
	t.Helper()
	return pgQuery[bool](t, sqltest.PostgresAdminDSN(), `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role)
}

// dropRoleAfter drops a tenant's role when the test ends, if the test
// left it (PostgreSQL's roles are the server's). Call it before the
// test's databases are made, so it runs after they are dropped.
func dropRoleAfter(t *testing.T, role string) {
	t.Helper()
	t.Cleanup(func() {
		db, err := sql.Open("pgx", sqltest.PostgresAdminDSN())
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec(`DROP ROLE IF EXISTS "` + role + `"`)
	})
}

// testObjects writes n ConfigMaps and a Secret into namespace "data" of
// a tenant and returns each one's resourceVersion by name.
func testObjects(t *testing.T, cs kubernetes.Interface, n int) map[string]string {
	t.Helper()
	ctx := ctxTimeout(t, time.Minute)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "data"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rvs := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("cm-%02d", i)
		cm, err := cs.CoreV1().ConfigMaps("data").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs["configmap/"+name] = cm.ResourceVersion
	}
	// One overwritten, so a key has history.
	cm, err := cs.CoreV1().ConfigMaps("data").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-00"},
		Data: map[string]string{"i": "0", "updated": "yes"}}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rvs["configmap/cm-00"] = cm.ResourceVersion
	s, err := cs.CoreV1().Secrets("data").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Data: map[string][]byte{"password": []byte("hunter2")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rvs["secret/s"] = s.ResourceVersion
	return rvs
}

// checkObjects fails unless namespace "data" of a tenant holds exactly
// want's objects (and extra, by name), each at its resourceVersion, with
// the values testObjects wrote.
func checkObjects(t *testing.T, what string, cs kubernetes.Interface, want map[string]string, extra ...string) {
	t.Helper()
	ctx := ctxTimeout(t, time.Minute)
	got := map[string]string{}
	cms, err := cs.CoreV1().ConfigMaps("data").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, cm := range cms.Items {
		if cm.Name == "kube-root-ca.crt" {
			continue
		}
		got["configmap/"+cm.Name] = cm.ResourceVersion
		if i, err := strconv.Atoi(cm.Data["i"]); err == nil && cm.Name != fmt.Sprintf("cm-%02d", i) {
			t.Errorf("%s: ConfigMap %s holds %v", what, cm.Name, cm.Data)
		}
	}
	secrets, err := cs.CoreV1().Secrets("data").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, s := range secrets.Items {
		got["secret/"+s.Name] = s.ResourceVersion
		if s.Name == "s" && string(s.Data["password"]) != "hunter2" {
			t.Errorf("%s: Secret s holds %q", what, s.Data["password"])
		}
	}
	for k, rv := range want {
		if got[k] != rv {
			t.Errorf("%s: %s at resourceVersion %q, want %q", what, k, got[k], rv)
		}
	}
	for _, k := range extra {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: no %s", what, k)
		}
	}
	if len(got) != len(want)+len(extra) {
		t.Errorf("%s: %d objects in namespace data, want %d: %v", what, len(got), len(want)+len(extra), got)
	}
}

// maxRV is the highest resourceVersion of rvs.
func maxRV(t *testing.T, rvs map[string]string) int64 {
	t.Helper()
	var top int64
	for _, rv := range rvs {
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		top = max(top, n)
	}
	return top
}

// createAfter creates ConfigMap name in namespace "data" and returns its
// resourceVersion.
func createAfter(t *testing.T, cs kubernetes.Interface, name string) int64 {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("data").Create(ctxTimeout(t, time.Minute), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	return rv
}

// TestHost_TenantMove moves a tenant between the host's datastores: two
// PostgreSQL databases of the machine's server and SQLite, through the
// Tenant resource and through the CLI. Each move keeps every object with
// its resourceVersion, the revision and the history (a watch from before
// the move resumes after it), and the identity (the admin kubeconfig
// made before works after), and drops the old copy; a move that fails
// leaves the tenant serving where it was; a deleted tenant's role is
// gone from the server.
func TestHost_TenantMove(t *testing.T) {
	pg := postgresBackend(t)
	suffix := strings.ToLower(rand.Text()[:6])
	name := "mv-" + suffix
	role := "tenant_mv_" + suffix
	dropRoleAfter(t, role)
	dsn1, dsn2 := pg.NewDSN(t), pg.NewDSN(t)
	dir := t.TempDir()
	hostArgs := func(second string) []string {
		return []string{"--tenant-datastore", dsn1, "--tenant-datastore", "second=" + second, "--tenant-datastore-max-conns", "4"}
	}
	hostCfg, stopHost := startTestHost(t, dir, hostArgs(dsn2)...)
	tenants := dynamic.NewForConfigOrDie(hostCfg).Resource(tenant.GVR)
	ctx := context.Background()
	kc := filepath.Join(dir, "mv.kubeconfig")
	if out, err := tenantCLI(t, dir, "create", name, "--out", kc); err != nil {
		t.Fatalf("tenant create: %v\n%s", err, out)
	}
	a := tenantClient(t, kc)
	want := testObjects(t, a, 10)
	before := maxRV(t, want)
	sqliteFile := filepath.Join(dir, "tenants", name, "state.db")

	// placed checks where the tenant's data is after a move: in datastore
	// ds (its schema, or its SQLite file) and nowhere else, the old copy
	// dropped once the tenant runs.
	placed := func(step, ds string, phase ...string) {
		t.Helper()
		wantPhase := tenant.PhaseReady
		if len(phase) > 0 {
			wantPhase = phase[0]
		}
		var last *tenant.Tenant
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			last, err = getTenant(ctx, tenants, name)
			return err == nil && len(last.Status.DropPending) == 0, nil
		})
		if err != nil {
			t.Fatalf("%s: the old copy is not dropped: %+v", step, last.Status)
		}
		if last.Status.Datastore != ds || last.Status.Phase != wantPhase {
			t.Errorf("%s: status says datastore %q, phase %s; want %s, %s", step, last.Status.Datastore, last.Status.Phase, ds, wantPhase)
		}
		c := meta.FindStatusCondition(last.Status.Conditions, tenant.ConditionPlaced)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "at revision") {
			t.Errorf("%s: condition Placed: %+v", step, c)
		}
		for db, dsn := range map[string]string{"default": dsn1, "second": dsn2} {
			if got := hasSchema(t, dsn, role); got != (db == ds) {
				t.Errorf("%s: schema %s in datastore %s: %v, want %v", step, role, db, got, db == ds)
			}
		}
		_, err = os.Stat(sqliteFile)
		if got := err == nil; got != (ds == "sqlite") {
			t.Errorf("%s: SQLite file there: %v (%v), want %v", step, got, err, ds == "sqlite")
		}
	}

	// 1. Through the Tenant resource: to the second database.
	if _, err := tenants.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"datastore":"second"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitMoved(ctxTimeout(t, 2*time.Minute), tenants, name, "second", true); err != nil {
		t.Fatal(err)
	}
	placed("to second (Tenant resource)", "second")
	checkObjects(t, "after the move to second", a, want) // the admin kubeconfig made before the move
	if rev := pgQuery[int64](t, dsn2, `SELECT val FROM "`+role+`".kv_meta WHERE name = 'revision'`); rev < before {
		t.Errorf("the second database is at revision %d, below the last write before the move (%d)", rev, before)
	}
	// The history came too: a list at a revision before the move is
	// read from it (a watch cache that started after the move cannot
	// serve it).
	after1 := createAfter(t, a, "after-1")
	if after1 <= before {
		t.Errorf("the first write after the move got revision %d, not above %d", after1, before)
	}
	old, err := a.CoreV1().ConfigMaps("data").List(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(before, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatalf("list at revision %d, before the move: %v", before, err)
	}
	n := 0
	for _, cm := range old.Items {
		if rv, ok := want["configmap/"+cm.Name]; ok {
			n++
			if rv != cm.ResourceVersion {
				t.Errorf("list at revision %d: %s at %s, want %s", before, cm.Name, cm.ResourceVersion, rv)
			}
		} else if cm.Name != "kube-root-ca.crt" {
			t.Errorf("list at revision %d: %s, written after it", before, cm.Name)
		}
	}
	if old.ResourceVersion != strconv.FormatInt(before, 10) || n != 10 {
		t.Errorf("list at revision %d, before the move: %d of the 10 at resourceVersion %s", before, n, old.ResourceVersion)
	}
	want["configmap/after-1"] = strconv.FormatInt(after1, 10)

	// 2. Through the CLI: to SQLite while suspended (it stays so, and
	// its first request wakes it there), then back to the first database.
	if out, err := tenantCLI(t, dir, "suspend", name); err != nil {
		t.Fatalf("tenant suspend: %v\n%s", err, out)
	}
	for _, ds := range []string{"sqlite", "default"} {
		out, err := tenantCLI(t, dir, "move", name, "--datastore", ds)
		if err != nil || !strings.Contains(out, "datastore "+ds) {
			t.Fatalf("tenant move --datastore %s: %v\n%s", ds, err, out)
		}
		if ds == "sqlite" {
			placed("to "+ds+" (CLI), suspended", ds, tenant.PhaseSuspended)
		} else {
			placed("to "+ds+" (CLI)", ds)
		}
		checkObjects(t, "after the move to "+ds, a, want)
	}

	// 3. A datastore the host was not given: refused, the tenant stays.
	if out, err := tenantCLI(t, dir, "move", name, "--datastore", "nowhere"); err == nil || !strings.Contains(err.Error(), "not given") {
		t.Errorf("tenant move --datastore nowhere: %v, want refused\n%s", err, out)
	}
	checkObjects(t, "after a move to nowhere", a, want)

	// 4. A move whose target cannot be reached fails and leaves the
	// tenant whole where it was; once it can be, the move is made.
	db2 := strings.TrimPrefix(dsn2[strings.LastIndex(dsn2, "/"):strings.Index(dsn2+"?", "?")], "/")
	admin := sqltest.PostgresAdminDSN()
	pgExec(t, admin, `ALTER DATABASE "`+db2+`" WITH ALLOW_CONNECTIONS false`)
	pgExec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '`+db2+`'`)
	out, err := tenantCLI(t, dir, "move", name, "--datastore", "second")
	pgExec(t, admin, `ALTER DATABASE "`+db2+`" WITH ALLOW_CONNECTIONS true`)
	if err == nil || !strings.Contains(err.Error(), "stays in default") {
		t.Errorf("tenant move to an unreachable database: %v, want it failed\n%s", err, out)
	}
	if _, err := waitPhase(ctxTimeout(t, time.Minute), tenants, name, tenant.PhaseReady); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, "after a failed move", a, want)
	if tn, _ := getTenant(ctx, tenants, name); tn.Status.Datastore != "default" {
		t.Errorf("after a failed move the status says datastore %q", tn.Status.Datastore)
	}
	for _, ds := range []string{"default", "second"} { // back, then again
		if out, err := tenantCLI(t, dir, "move", name, "--datastore", ds); err != nil {
			t.Fatalf("tenant move --datastore %s: %v\n%s", ds, err, out)
		}
	}
	placed("to second after a failed move", "second")
	checkObjects(t, "after the move to second", a, want)

	// 5. A host restarted with "second" naming another, empty, database
	// makes no new empty cluster in the tenant's place; restarted with
	// the right one, it serves the tenant again.
	stopHost()
	dsn3 := pg.NewDSN(t)
	hostCfg, stopHost = startTestHost(t, dir, hostArgs(dsn3)...)
	tenants = dynamic.NewForConfigOrDie(hostCfg).Resource(tenant.GVR)
	if _, err := waitPhase(ctxTimeout(t, time.Minute), tenants, name, tenant.PhaseFailed); err != nil {
		t.Fatal(err)
	}
	if tn, _ := getTenant(ctx, tenants, name); !strings.Contains(tn.Status.Message, "not in datastore second") {
		t.Errorf("the tenant's status with its datastore emptied: %q", tn.Status.Message)
	}
	if hasSchema(t, dsn3, role) {
		t.Error("the host made the tenant a new place in the empty database")
	}
	stopHost()
	hostCfg, _ = startTestHost(t, dir, hostArgs(dsn2)...)
	tenants = dynamic.NewForConfigOrDie(hostCfg).Resource(tenant.GVR)
	if _, err := waitPhase(ctxTimeout(t, time.Minute), tenants, name, tenant.PhaseReady); err != nil {
		t.Fatal(err)
	}
	checkObjects(t, "after the host restarted", a, want)

	// Deleted, the tenant leaves nothing on the server: no schema, no
	// role.
	if out, err := tenantCLI(t, dir, "delete", name); err != nil {
		t.Fatalf("tenant delete: %v\n%s", err, out)
	}
	if hasSchema(t, dsn1, role) || hasSchema(t, dsn2, role) || hasRole(t, role) {
		t.Errorf("after delete: schema in default %v, in second %v, role %v", hasSchema(t, dsn1, role), hasSchema(t, dsn2, role), hasRole(t, role))
	}
}

// TestHost_TenantBackupRestore backs a running tenant up through the
// TenantBackup resource and through the CLI, deletes it, and restores
// each backup into a new tenant, through the Tenant resource and the
// CLI: the same objects at the same resourceVersions, nothing written
// after the backup, the same identity (the deleted tenant's admin
// kubeconfig and a service-account token it issued work); with a SQLite
// file per tenant, and on PostgreSQL.
func TestHost_TenantBackupRestore(t *testing.T) {
	for _, b := range sqltest.Backends() {
		switch b.Name {
		case sqltest.SQLite:
			t.Run("sqlite", func(t *testing.T) { testTenantBackupRestore(t, func(string) []string { return nil }) })
		case sqltest.Postgres:
			t.Run("postgres", func(t *testing.T) {
				testTenantBackupRestore(t, func(suffix string) []string {
					for _, n := range []string{"bk-", "rs-"} {
						dropRoleAfter(t, "tenant_"+strings.TrimSuffix(n, "-")+"_"+suffix)
					}
					return []string{"--tenant-datastore", b.NewDSN(t), "--tenant-datastore-max-conns", "4"}
				})
			})
		}
	}
}

func testTenantBackupRestore(t *testing.T, hostArgs func(suffix string) []string) {
	suffix := strings.ToLower(rand.Text()[:6])
	name, restored := "bk-"+suffix, "rs-"+suffix
	args := hostArgs(suffix)
	dir := t.TempDir()
	hostCfg, _ := startTestHost(t, dir, args...)
	dyn := dynamic.NewForConfigOrDie(hostCfg)
	tenants, backups := dyn.Resource(tenant.GVR), dyn.Resource(tenant.BackupGVR)
	ctx := context.Background()
	kc := filepath.Join(dir, "bk.kubeconfig")
	if out, err := tenantCLI(t, dir, "create", name, "--out", kc); err != nil {
		t.Fatalf("tenant create: %v\n%s", err, out)
	}
	a := tenantClient(t, kc)
	want := testObjects(t, a, 10)
	// A service-account token, signed by the tenant's key.
	if _, err := a.CoreV1().ServiceAccounts("data").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := a.CoreV1().ServiceAccounts("data").CreateToken(ctx, "robot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A backup through the TenantBackup resource, while it runs.
	u, err := tenant.BackupToUnstructured(&tenant.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b1"}, Spec: tenant.BackupSpec{Tenant: name}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backups.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b1, err := waitBackup(ctxTimeout(t, time.Minute), backups, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if b1.Status.Revision < maxRV(t, want) || b1.Status.Keys == 0 || b1.Status.Size == 0 || b1.Status.CompletionTime == nil {
		t.Errorf("TenantBackup b1's status: %+v; want revision >= %d, keys, size, completion time", b1.Status, maxRV(t, want))
	}
	if fi, err := os.Stat(b1.Status.File); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != b1.Status.Size {
		t.Errorf("b1's file %s: %v, %v; want mode 0600, %d bytes", b1.Status.File, fi, err, b1.Status.Size)
	}
	// Written after it: not in it.
	after := createAfter(t, a, "after-b1")
	if after <= b1.Status.Revision {
		t.Errorf("a write after the backup got revision %d, not above the backup's %d", after, b1.Status.Revision)
	}

	// A backup through the CLI, to a file, while the tenant is
	// suspended (it stays so); its TenantBackup goes.
	if out, err := tenantCLI(t, dir, "suspend", name); err != nil {
		t.Fatalf("tenant suspend: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "b2.sqlkube.gz")
	if out, err := tenantCLI(t, dir, "backup", name, "--to", file, "--name", "b2"); err != nil {
		t.Fatalf("tenant backup --to: %v\n%s", err, out)
	}
	if tn, err := getTenant(ctx, tenants, name); err != nil || tn.Status.Phase != tenant.PhaseSuspended || !tn.Spec.Suspended {
		t.Errorf("a suspended tenant after its backup: %v, %v; want it still suspended", tn.Status.Phase, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the CLI's backup file: %v, %v; want mode 0600", fi, err)
	}
	if _, err := backups.Get(ctx, "b2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("TenantBackup b2 after `tenant backup --to` without --keep: %v, want it deleted", err)
	}

	// The tenant goes; its backups stay.
	if out, err := tenantCLI(t, dir, "delete", name); err != nil {
		t.Fatalf("tenant delete: %v\n%s", err, out)
	}
	if _, err := os.Stat(b1.Status.File); err != nil {
		t.Fatalf("b1's file after its tenant's delete: %v", err)
	}

	// Restored through the Tenant resource, under another name, from b1.
	u, err = tenant.ToUnstructured(&tenant.Tenant{ObjectMeta: metav1.ObjectMeta{Name: restored},
		Spec: tenant.Spec{RestoreFrom: &tenant.RestoreSource{Backup: "b1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenants.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := waitRestored(ctxTimeout(t, 2*time.Minute), tenants, restored)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(r.Status.Conditions, tenant.ConditionRestored); c == nil || c.Status != metav1.ConditionTrue ||
		!strings.Contains(c.Message, fmt.Sprintf("at revision %d ", b1.Status.Revision)) {
		t.Errorf("condition Restored: %+v; want True at revision %d", c, b1.Status.Revision)
	}
	rkc := filepath.Join(dir, "rs.kubeconfig")
	if out, err := tenantCLI(t, dir, "kubeconfig", restored, "--out", rkc); err != nil {
		t.Fatalf("tenant kubeconfig: %v\n%s", err, out)
	}
	checkObjects(t, "restored from b1", tenantClient(t, rkc), want)
	// The same identity: the deleted tenant's admin kubeconfig and its
	// service-account token work against the restored one's endpoint.
	oldAdmin := retarget(t, kc, rkc)
	checkObjects(t, "restored from b1, with the deleted tenant's kubeconfig", oldAdmin, want)
	host, ca := mustHost(t, rkc)
	robot := kubernetes.NewForConfigOrDie(&rest.Config{Host: host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if _, err := robot.CoreV1().ConfigMaps("data").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the deleted tenant's service-account token at the restored one: %v, want authenticated (and forbidden)", err)
	}

	// Restored through the CLI, under the deleted tenant's own name, from
	// the CLI's file: the write after b1 is in it.
	kc2 := filepath.Join(dir, "bk2.kubeconfig")
	if out, err := tenantCLI(t, dir, "restore", name, "--from", file, "--out", kc2); err != nil {
		t.Fatalf("tenant restore --from: %v\n%s", err, out)
	}
	checkObjects(t, "restored from the CLI's backup", retarget(t, kc, kc2), want, "configmap/after-b1")

	for _, n := range []string{name, restored} {
		if out, err := tenantCLI(t, dir, "delete", n); err != nil {
			t.Fatalf("tenant delete %s: %v\n%s", n, err, out)
		}
	}
	// A deleted TenantBackup takes its file with it.
	if err := backups.Delete(ctx, "b1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := backups.Get(ctx, "b1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Error("TenantBackup b1 is not deleted")
	}
	if _, err := os.Stat(b1.Status.File); !os.IsNotExist(err) {
		t.Errorf("b1's file after its delete: %v", err)
	}
	if len(args) > 0 {
		for _, n := range []string{name, restored} {
			if role := "tenant_" + strings.ReplaceAll(n, "-", "_"); hasRole(t, role) {
				t.Errorf("role %s is left after its tenant's delete", role)
			}
		}
	}
}

// retarget is a client with kubeconfig from's credentials and CA at
// kubeconfig to's endpoint.
func retarget(t *testing.T, from, to string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", from)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, _ = mustHost(t, to)
	cfg.Timeout = 30 * time.Second
	return kubernetes.NewForConfigOrDie(cfg)
}
