package apiserver_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/storage"
)

// noSpaceQuota is the datastore quota of TestServer_NoSpace: room for an
// API server's bootstrap objects on every backend and a few MiB more.
const noSpaceQuota = 16 << 20

// tool finds a command-line client the test drives. Without it the test
// is skipped, or fails under CI=true (make test-deps installs them).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (%v); CI must provide it (make test-deps)", name, err)
		}
		t.Skipf("skipping: %s not found (%v)", name, err)
	}
	return p
}

// runTool runs a client to its end with env added and returns its
// stdout, or an error with its stderr.
func runTool(t *testing.T, env []string, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// kubeconfigFor writes a kubeconfig for the (unauthenticated) test server
// at cfg.Host and returns the environment that makes kubectl use it.
func kubeconfigFor(t *testing.T, cfg *rest.Config) []string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q}}]
users: [{name: test, user: {}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, cfg.Host)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"KUBECONFIG=" + path, "HOME=" + dir}
}

// noSpaceServer is an API server over a store with noSpaceQuota, whose
// etcd API also listens for etcdctl.
type noSpaceServer struct {
	cfg      *rest.Config
	cs       kubernetes.Interface
	etcdAddr string
}

func startNoSpaceServer(t *testing.T, dsn string) *noSpaceServer {
	t.Helper()
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, QuotaBytes: noSpaceQuota, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	srv := etcdshim.New(etcdshim.Options{Backend: store, Logger: zerolog.Nop(), Name: "nospace", ClientURLs: []string{"http://" + addr}, ClusterKey: store.Describe()})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Stop(5 * time.Second)
		<-served
	})
	client := storage.Local(srv)
	t.Cleanup(func() { _ = client.Close() })
	cfg, _ := serveAPIWith(t, apiserver.Config{Client: client})
	return &noSpaceServer{cfg: cfg, cs: kubernetes.NewForConfigOrDie(cfg), etcdAddr: addr}
}

// checkNoSpace fails the test unless err is kube-apiserver's answer to a
// write etcd refused with NOSPACE: 500, no reason, etcd's message.
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

// TestServer_NoSpace fills an API server's datastore past its quota on
// every backend, and checks what clients see against kube-apiserver over
// etcd (k8s.io/apiserver 1.37: the etcd3 store returns etcd's NOSPACE
// unchanged, the registry's storeerr.Interpret* pass it through, and
// responsewriters.ErrorToAPIStatus answers an error that is not an API
// status with 500, reason "" and the error's text):
//
//   - creates, updates, patches of every kind, server-side apply, a status
//     update, an event, and a deletecollection that has to mark an object
//     with a finalizer get 500 "etcdserver: mvcc: database space exceeded"
//     with no reason, through client-go and kubectl ("Error from server:
//     etcdserver: mvcc: database space exceeded"); other errors keep their
//     answers (a missing object is still 404);
//   - reads, deletes (one by one, by kubectl and deletecollection) work,
//     and so do etcdctl's compaction and defrag;
//   - after `etcdctl alarm disarm` writes work again, through both
//     clients;
//   - every acknowledged object that was not deleted is listed with its
//     content.
func TestServer_NoSpace(t *testing.T) {
	kubectl, etcdctl := tool(t, "kubectl"), tool(t, "etcdctl")
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		start := time.Now()
		s := startNoSpaceServer(t, b.NewDSN(t))
		phases := []string{fmt.Sprintf("server up %v", time.Since(start).Round(time.Millisecond))}
		mark := time.Now()
		phase := func(name string) {
			phases = append(phases, fmt.Sprintf("%s %v", name, time.Since(mark).Round(time.Millisecond)))
			mark = time.Now()
		}
		kenv := kubeconfigFor(t, s.cfg)
		ctl := func(args ...string) (string, error) {
			return runTool(t, []string{"ETCDCTL_API=3"}, etcdctl, append([]string{"--endpoints=" + s.etcdAddr, "--command-timeout=60s"}, args...)...)
		}
		ctx := context.Background()
		cms := s.cs.CoreV1().ConfigMaps("default")

		// Before: a few small objects, a deployment (for its status)
		// and a configmap a finalizer holds.
		want := map[string][]byte{}
		for i := range 5 {
			name := fmt.Sprintf("keep-%d", i)
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			want[name] = nil
		}
		labels := map[string]string{"app": "web"}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}},
		}}
		if dep, err := s.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		} else {
			want["deployment/web"], _ = json.Marshal(dep.UID)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Labels: map[string]string{"held": "yes"}, Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want["held"] = nil

		// Fill: 480 KiB configmaps of random bytes until the quota
		// refuses one.
		var fillErr error
		var filled int
		for i := 0; i < 4*noSpaceQuota/(480<<10); i++ {
			val := make([]byte, 480<<10)
			_, _ = rand.Read(val)
			name := fmt.Sprintf("fill-%03d", i)
			parity := map[bool]string{true: "even", false: "odd"}[i%2 == 0]
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"parity": parity}}, BinaryData: map[string][]byte{"v": val}}, metav1.CreateOptions{})
			if err != nil {
				fillErr = err
				break
			}
			want[name] = val
			filled++
		}
		if fillErr == nil {
			t.Fatalf("%d creates of 480 KiB under a quota of %d bytes all succeeded", filled, noSpaceQuota)
		}
		t.Logf("%d creates of 480 KiB acknowledged, then: %v", filled, fillErr)
		phase("fill")
		checkNoSpace(t, "the create past the quota", fillErr)
		if out, err := ctl("alarm", "list"); err != nil || !strings.Contains(out, "alarm:NOSPACE") {
			t.Fatalf("etcdctl alarm list: %q, %v; want a NOSPACE alarm", out, err)
		}

		// Every write path is refused as kube-apiserver refuses it.
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small"}}, metav1.CreateOptions{})
		checkNoSpace(t, "create", err)
		cm, err := cms.Get(ctx, "keep-0", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get while over the quota: %v", err)
		}
		cm.Data["i"] = "changed"
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		checkNoSpace(t, "update", err)
		for pt, patch := range map[types.PatchType]string{
			types.MergePatchType:          `{"data":{"p":"merge"}}`,
			types.StrategicMergePatchType: `{"data":{"p":"strategic"}}`,
			types.JSONPatchType:           `[{"op":"add","path":"/data/p","value":"json"}]`,
		} {
			_, err = cms.Patch(ctx, "keep-1", pt, []byte(patch), metav1.PatchOptions{})
			checkNoSpace(t, string(pt)+" patch", err)
		}
		_, err = cms.Apply(ctx, corev1apply.ConfigMap("keep-2", "default").WithData(map[string]string{"a": "applied"}), metav1.ApplyOptions{FieldManager: "test", Force: true})
		checkNoSpace(t, "server-side apply", err)
		_, err = cms.Apply(ctx, corev1apply.ConfigMap("applied-new", "default").WithData(map[string]string{"a": "applied"}), metav1.ApplyOptions{FieldManager: "test"})
		checkNoSpace(t, "server-side apply of a new object", err)
		if d, err := s.cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else {
			d.Status.ObservedGeneration = d.Generation
			_, err = s.cs.AppsV1().Deployments("default").UpdateStatus(ctx, d, metav1.UpdateOptions{})
			checkNoSpace(t, "status update", err)
		}
		_, err = s.cs.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev"},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "keep-0"}, Reason: "Test", Message: "m", Type: corev1.EventTypeNormal}, metav1.CreateOptions{})
		checkNoSpace(t, "event create", err)
		err = cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "held=yes"})
		checkNoSpace(t, "deletecollection that marks an object with a finalizer", err)
		_, err = cms.Get(ctx, "missing", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("get of a missing object while over the quota: %v, want 404 NotFound", err)
		}
		manifest := filepath.Join(t.TempDir(), "cm.yaml")
		if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-file}\ndata: {a: b}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"create", "-f", manifest}, fmt.Sprintf("Error from server: error when creating %q: etcdserver: mvcc: database space exceeded", manifest)},
			{[]string{"label", "configmap", "keep-3", "x=y"}, "Error from server: etcdserver: mvcc: database space exceeded"},
			// kubectl create configmap says what failed its own way.
			{[]string{"create", "configmap", "by-kubectl", "--from-literal=a=b"}, "error: failed to create configmap: etcdserver: mvcc: database space exceeded"},
		} {
			_, err := runTool(t, kenv, kubectl, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("kubectl %s over the quota: %v; want %q", strings.Join(tc.args, " "), err, tc.want)
			}
		}

		phase("refusals")

		// Reads and deletes work: kubectl, one by one, deletecollection.
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "parity"})
		if err != nil || len(list.Items) != filled {
			t.Fatalf("list while over the quota: %d items, %v; want %d", len(list.Items), err, filled)
		}
		if out, err := runTool(t, kenv, kubectl, "delete", "configmap", "fill-001"); err != nil || !strings.Contains(out, "deleted") {
			t.Fatalf("kubectl delete over the quota: %q, %v", out, err)
		}
		if err := cms.Delete(ctx, "fill-003", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete over the quota: %v", err)
		}
		if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "parity=odd"}); err != nil {
			t.Fatalf("deletecollection over the quota: %v", err)
		}
		for name := range want {
			var i int
			if _, err := fmt.Sscanf(name, "fill-%03d", &i); err == nil && i%2 == 1 {
				delete(want, name)
			}
		}

		phase("deletes")

		// Compaction and defragmentation work; after the disarm, writes
		// are taken again.
		var status []struct {
			Status struct {
				Header struct {
					Revision int64 `json:"revision"`
				} `json:"header"`
				DbSize int64 `json:"dbSize"`
			}
		}
		out, err := ctl("endpoint", "status", "-w", "json")
		if err != nil || json.Unmarshal([]byte(out), &status) != nil || len(status) != 1 {
			t.Fatalf("etcdctl endpoint status: %q, %v", out, err)
		}
		before := status[0].Status.DbSize
		if out, err := ctl("compaction", "--physical", fmt.Sprint(status[0].Status.Header.Revision)); err != nil {
			t.Fatalf("etcdctl compaction over the quota: %q, %v", out, err)
		}
		if out, err := ctl("defrag"); err != nil {
			t.Fatalf("etcdctl defrag over the quota: %q, %v", out, err)
		}
		out, err = ctl("endpoint", "status", "-w", "json")
		if err != nil || json.Unmarshal([]byte(out), &status) != nil || len(status) != 1 {
			t.Fatalf("etcdctl endpoint status: %q, %v", out, err)
		}
		t.Logf("datastore size %d KiB before compaction and defrag, %d KiB after (quota %d KiB)", before>>10, status[0].Status.DbSize>>10, noSpaceQuota>>10)
		if status[0].Status.DbSize >= noSpaceQuota {
			t.Fatalf("datastore of %d bytes after deletes, compaction and defrag; want under the quota", status[0].Status.DbSize)
		}
		phase("compaction and defrag")
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small"}}, metav1.CreateOptions{})
		checkNoSpace(t, "create before the disarm", err)
		if out, err := ctl("alarm", "disarm"); err != nil || !strings.Contains(out, "alarm:NOSPACE") {
			t.Fatalf("etcdctl alarm disarm: %q, %v", out, err)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create after the disarm: %v", err)
		}
		want["after"] = nil
		if _, err := runTool(t, kenv, kubectl, "create", "configmap", "by-kubectl", "--from-literal=a=b"); err != nil {
			t.Fatalf("kubectl create after the disarm: %v", err)
		}
		want["by-kubectl"] = nil
		if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "held=yes"}); err != nil {
			t.Fatalf("deletecollection that marks an object with a finalizer, after the disarm: %v", err)
		}

		// Nothing acknowledged is lost.
		list, err = cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, cm := range list.Items {
			got[cm.Name] = true
			if val, ok := want[cm.Name]; ok && val != nil && !bytes.Equal(cm.BinaryData["v"], val) {
				t.Errorf("configmap %s does not hold what was acknowledged", cm.Name)
			}
			if cm.Name == "held" && cm.DeletionTimestamp == nil {
				t.Errorf("configmap held is not being deleted after the deletecollection")
			}
		}
		if d, err := s.cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
			t.Errorf("deployment web: %v", err)
		} else if uid, _ := json.Marshal(d.UID); !bytes.Equal(uid, want["deployment/web"]) {
			t.Errorf("deployment web has another uid")
		}
		delete(want, "deployment/web")
		for name := range want {
			if !got[name] {
				t.Errorf("acknowledged configmap %s is lost", name)
			}
		}
		phase("disarm, writes and checks")
		t.Logf("%s: %d objects checked, %v (%s)", b.Name, len(want), time.Since(start).Round(time.Millisecond), strings.Join(phases, ", "))
	})
}
