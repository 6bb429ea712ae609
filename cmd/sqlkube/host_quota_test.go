package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/tenant"
)

// tenantQuota is tenant A's spec.quota in TestHost_TenantQuota: room
// for a tenant's bootstrap objects and a few large ConfigMaps. SQLite's
// size counts its WAL, which grows to 16 MiB before a checkpoint; on
// PostgreSQL the bootstrap takes about 2 MiB.
var tenantQuota = map[string]string{sqltest.SQLite: "40Mi", sqltest.Postgres: "12Mi"}

// fillSize is the size of the ConfigMaps that fill a tenant.
const fillSize = 512 << 10

// TestHost_TenantQuota fills one tenant past its spec.quota through its
// Kubernetes API while another tenant of the same host (and, on
// PostgreSQL, the same database and pool) keeps taking writes; the full
// one still serves reads and deletes, reports the alarm in its status,
// keeps it while its quota stays under its size, and takes writes again
// once the provider raises spec.quota. Nothing acknowledged is lost.
func TestHost_TenantQuota(t *testing.T) {
	for _, b := range sqltest.Backends() {
		switch b.Name {
		case sqltest.SQLite:
			t.Run("sqlite", func(t *testing.T) { testTenantQuota(t, tenantQuota[b.Name], nil, nil) })
		case sqltest.Postgres:
			t.Run("postgres", func(t *testing.T) {
				dsn := b.NewDSN(t)
				suffix := strings.ToLower(rand.Text()[:6])
				dropTenantRoles(t, dsn, suffix)
				testTenantQuota(t, tenantQuota[b.Name], []string{"--tenant-datastore", dsn, "--tenant-datastore-max-conns", "6"}, &suffix)
			})
		}
	}
}

// dropTenantRoles drops, when the test ends, whatever is left of the
// PostgreSQL roles of tenants whose names end in "-"+suffix, and what
// they own in dsn's database: roles are the server's, and outlive the
// test's database. A test that deleted its tenants leaves none.
func dropTenantRoles(t *testing.T, dsn, suffix string) {
	t.Helper()
	t.Cleanup(func() {
		for _, role := range tenantRoles(t, dsn, suffix) {
			t.Errorf("PostgreSQL role %s was left behind; dropping it", role)
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Error(err)
				return
			}
			_, err = db.Exec(`DROP OWNED BY "` + role + `" CASCADE`)
			if err == nil {
				_, err = db.Exec(`DROP ROLE "` + role + `"`)
			}
			db.Close()
			if err != nil {
				t.Error(err)
			}
		}
	})
}

// tenantRoles lists the PostgreSQL roles of tenants whose names end in
// "-"+suffix.
func tenantRoles(t *testing.T, dsn, suffix string) []string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT rolname FROM pg_roles WHERE rolname LIKE 'tenant\_%\_' || $1`, suffix)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var roles []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		roles = append(roles, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return roles
}

// checkNoSpace fails the test unless err is kube-apiserver's answer to
// a write etcd refused with NOSPACE: 500, no reason, etcd's message.
func checkNoSpace(t *testing.T, what string, err error) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("%s: %v (%T), want a Status", what, err, err)
	}
	st := se.ErrStatus
	if st.Code != http.StatusInternalServerError || st.Reason != metav1.StatusReasonUnknown || st.Status != metav1.StatusFailure ||
		st.Message != "etcdserver: mvcc: database space exceeded" || st.Details != nil {
		t.Fatalf("%s: Status %+v; want kube-apiserver's over etcd's NOSPACE: 500, no reason, \"etcdserver: mvcc: database space exceeded\", no details", what, st)
	}
}

// bigConfigMap is a ConfigMap of fillSize random (incompressible) bytes.
func bigConfigMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	b := make([]byte, fillSize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, BinaryData: map[string][]byte{"b": b}}
}

// checkConfigMaps fails the test unless every ConfigMap of want is in
// cs's default namespace with its data.
func checkConfigMaps(t *testing.T, what string, cs kubernetes.Interface, want map[string][]byte) {
	t.Helper()
	list, err := cs.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("%s: list: %v", what, err)
	}
	got := map[string][]byte{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.BinaryData["b"]
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s: acknowledged ConfigMap %s lost or changed", what, name)
		}
	}
}

func testTenantQuota(t *testing.T, quota string, hostArgs []string, pgSuffix *string) {
	ctx := context.Background()
	dir := t.TempDir()
	suffix := strings.ToLower(rand.Text()[:6])
	if pgSuffix != nil {
		suffix = *pgSuffix
	}
	nameA, nameB := "a-"+suffix, "b-"+suffix
	hostCfg, _ := startTestHost(t, dir, hostArgs...)
	tenants := dynamic.NewForConfigOrDie(hostCfg).Resource(tenant.GVR)
	kcA, kcB := filepath.Join(dir, "a.kubeconfig"), filepath.Join(dir, "b.kubeconfig")
	if out, err := tenantCLI(t, dir, "create", nameA, "--quota", quota, "--out", kcA); err != nil {
		t.Fatalf("tenant create a --quota %s: %v\n%s", quota, err, out)
	}
	if out, err := tenantCLI(t, dir, "create", nameB, "--out", kcB); err != nil {
		t.Fatalf("tenant create b: %v\n%s", err, out)
	}
	// Every tenant goes, with its data (and role), whatever the test
	// did: registered after the host's stop, so it runs first.
	t.Cleanup(func() {
		for _, name := range []string{nameA, nameB} {
			if out, err := tenantCLI(t, dir, "delete", name); err != nil {
				t.Errorf("tenant delete %s: %v\n%s", name, err, out)
			}
		}
	})
	a, b := tenantClient(t, kcA), tenantClient(t, kcB)
	q := resource.MustParse(quota)
	if ta, err := waitPhase(ctxTimeout(t, time.Minute), tenants, nameA, tenant.PhaseReady); err != nil || ta.Status.QuotaBytes != q.Value() {
		t.Fatalf("a: %v, status.quotaBytes %v; want %d", err, ta, q.Value())
	}

	// Fill a through its API until it refuses a write; b takes one
	// alongside each of a's.
	ackedA, ackedB := map[string][]byte{}, map[string][]byte{}
	var refused error
	for i := 0; refused == nil; i++ {
		if i == 200 {
			t.Fatalf("200 ConfigMaps of %d KiB all created under a quota of %s", fillSize>>10, quota)
		}
		cm := bigConfigMap(t, fmt.Sprintf("fill-%03d", i))
		if _, refused = a.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); refused == nil {
			ackedA[cm.Name] = cm.BinaryData["b"]
		}
		cm = bigConfigMap(t, fmt.Sprintf("b-%03d", i))
		if _, err := b.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("b's create %s while a fills: %v", cm.Name, err)
		}
		ackedB[cm.Name] = cm.BinaryData["b"]
	}
	t.Logf("a: %d ConfigMaps of %d KiB acknowledged under its quota of %s", len(ackedA), fillSize>>10, quota)
	checkNoSpace(t, "a's create past its quota", refused)
	// Now every write that could grow a's store is refused (its NOSPACE
	// alarm), however small; b's are taken.
	small := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
	}
	_, err := a.CoreV1().ConfigMaps("default").Create(ctx, small("small"), metav1.CreateOptions{})
	checkNoSpace(t, "a's small create in alarm", err)
	for i := range 3 {
		cm := bigConfigMap(t, fmt.Sprintf("b-alarm-%d", i))
		if _, err := b.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("b's create while a is in alarm: %v", err)
		}
		ackedB[cm.Name] = cm.BinaryData["b"]
	}
	// The alarm shows in a's status; b's says nothing.
	waitStatus := func(name, what string, ok func(tenant.Status) bool) tenant.Status {
		t.Helper()
		var last tenant.Status
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := getTenant(ctx, tenants, name)
			if err != nil {
				return false, nil
			}
			last = got.Status
			return got.Status.ObservedGeneration == got.Generation && ok(got.Status), nil
		})
		if err != nil {
			t.Fatalf("%s: status %+v; want %s", name, last, what)
		}
		return last
	}
	inAlarm := func(s tenant.Status) bool {
		return s.Phase == tenant.PhaseReady && strings.Contains(s.Message, "NOSPACE")
	}
	st := waitStatus(nameA, "Ready with the NOSPACE alarm in its message", inAlarm)
	t.Logf("a's status: %s", st.Message)
	if tb, err := getTenant(ctx, tenants, nameB); err != nil || tb.Status.Message != "" {
		t.Errorf("b's status: %+v, %v; want no message", tb, err)
	}
	// Reads and deletes go on in a.
	checkConfigMaps(t, "a in alarm", a, ackedA)
	if _, err := a.CoreV1().ConfigMaps("default").Get(ctx, "fill-000", metav1.GetOptions{}); err != nil {
		t.Fatalf("a's get in alarm: %v", err)
	}
	if err := a.CoreV1().ConfigMaps("default").Delete(ctx, "fill-000", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("a's delete in alarm: %v", err)
	}
	delete(ackedA, "fill-000")

	setQuota := func(q string) {
		t.Helper()
		patch := []byte(`{"spec":{"quota":"` + q + `"}}`)
		if _, err := tenants.Patch(ctx, nameA, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A quota still under its size disarms nothing.
	setQuota("1Mi")
	st = waitStatus(nameA, "quotaBytes 1Mi, still in alarm", func(s tenant.Status) bool { return s.QuotaBytes == 1<<20 && inAlarm(s) })
	t.Logf("a's status at 1Mi: %s", st.Message)
	_, err = a.CoreV1().ConfigMaps("default").Create(ctx, small("small"), metav1.CreateOptions{})
	checkNoSpace(t, "a's create with its quota lowered", err)

	// A quota over its size does: a takes writes again at once.
	setQuota("1Gi")
	waitStatus(nameA, "quotaBytes 1Gi, no message", func(s tenant.Status) bool {
		return s.QuotaBytes == 1<<30 && s.Phase == tenant.PhaseReady && s.Message == ""
	})
	for i := range 3 {
		cm := bigConfigMap(t, fmt.Sprintf("after-%d", i))
		if _, err := a.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a's create with its quota raised: %v", err)
		}
		ackedA[cm.Name] = cm.BinaryData["b"]
	}
	checkConfigMaps(t, "a after its quota was raised", a, ackedA)
	checkConfigMaps(t, "b", b, ackedB)
}
