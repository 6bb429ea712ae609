package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/internal/testfs"
)

// metricValue is the value of an unlabelled series in the server's
// /metrics ("" when it has none).
func metricValue(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestServer_DiskFull runs `sqlkube server` on SQLite on a small tmpfs,
// with a quota far above the file system, fills the file system through
// the Kubernetes API, and checks, without restarting the server:
//
//   - the create that finds no space, and every create after it, gets
//     503 ServiceUnavailable with Retry-After and a message that says the
//     disk is full, while /readyz fails its datastore-disk check (and
//     passes with ?exclude=datastore-disk) and sqlkube_store_disk_full is
//     1 on /metrics;
//   - gets and lists are served, and deleting through the API works;
//   - once the operator frees space, /readyz, the metric and writes
//     come back by themselves, with the reserve made again;
//   - every acknowledged create that was not deleted is listed with its
//     content.
func TestServer_DiskFull(t *testing.T) {
	const (
		fsSize  = 128 << 20
		reserve = 24 << 20
		value   = 256 << 10
	)
	fs := testfs.Tmpfs(t, fsSize)
	s := startCommand(t, t.TempDir(), "server", "--datastore", "sqlite://"+filepath.Join(fs, "state.db"),
		"--datastore-reserve-bytes", fmt.Sprint(reserve), "--quota-backend-bytes", fmt.Sprint(8*fsSize),
		"--controllers=-*", "--disable-scheduler")
	pid := s.cmd.Process.Pid
	cs := s.clientset(t)
	ctx := context.Background()
	until(t, commandTimeout, "the server is ready", func() (bool, error) {
		code, _, err := s.readyz(t)
		return code == http.StatusOK, err
	})
	if st, err := os.Stat(filepath.Join(fs, "state.db-reserve")); err != nil || st.Size() != reserve {
		t.Fatalf("reserve file: %v, %v; want %d bytes", st, err, reserve)
	}
	if got := metricValue(t, cs, "sqlkube_store_disk_full"); got != "0" {
		t.Fatalf("sqlkube_store_disk_full %q before the disk fills, want 0", got)
	}
	// Most of the file system goes to another file, which the operator
	// removes later; the store fills the rest.
	filler := filepath.Join(fs, "filler")
	testfs.Fill(t, filler, 40<<20)

	// create sends one create without client-go's retries (which would
	// retry a 503 with Retry-After ten times).
	create := func(name string, val []byte) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, BinaryData: map[string][]byte{"v": val}}
		return cs.CoreV1().RESTClient().Post().Namespace("default").Resource("configmaps").Body(cm).MaxRetries(0).Do(ctx).Error()
	}
	acked := map[string][]byte{}
	var order []string
	var refused error
	start := time.Now()
	for i := 0; i < 2*fsSize/value; i++ {
		val := make([]byte, value)
		_, _ = rand.Read(val)
		name := fmt.Sprintf("fill-%03d", i)
		if refused = create(name, val); refused != nil {
			break
		}
		acked[name] = val
		order = append(order, name)
	}
	if !apierrors.IsServiceUnavailable(refused) {
		t.Fatalf("after %d creates of %d KiB: %v; want 503 ServiceUnavailable", len(acked), value>>10, refused)
	}
	t.Logf("%d creates of %d KiB acknowledged in %v, then: %v", len(acked), value>>10, time.Since(start).Round(time.Millisecond), refused)
	if delay, ok := apierrors.SuggestsClientDelay(refused); !ok || delay != 1 || !strings.Contains(refused.Error(), "disk is full") {
		t.Errorf("the refusal: %v, Retry-After %d (%v); want 1 s and a message that says the disk is full", refused, delay, ok)
	}
	if err := create("small", []byte("x")); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("a small create while the disk is full: %v, want 503", err)
	}
	code, body, err := s.readyz(t)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]datastore-disk failed: the datastore's disk is full") || !strings.Contains(body, "[+]etcd ok") {
		t.Errorf("/readyz while the disk is full: %d %v\n%s", code, err, body)
	}
	t.Logf("/readyz while the disk is full:\n%s", body)
	if code, _, err := s.readyzPath(t, "/readyz?exclude=datastore-disk"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz?exclude=datastore-disk while the disk is full: %d %v", code, err)
	}
	if got := metricValue(t, cs, "sqlkube_store_disk_full"); got != "1" {
		t.Errorf("sqlkube_store_disk_full %q while the disk is full, want 1", got)
	}
	if got := metricValue(t, cs, "sqlkube_store_disk_reserve_bytes"); got != "0" {
		t.Errorf("sqlkube_store_disk_reserve_bytes %q while the disk is full, want 0 (given back)", got)
	}

	// Reads are served; deleting through the API works.
	if cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, order[0], metav1.GetOptions{}); err != nil || !bytes.Equal(cm.BinaryData["v"], acked[order[0]]) {
		t.Fatalf("get while the disk is full: %v", err)
	}
	list, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) < len(acked) {
		t.Fatalf("list while the disk is full: %v, %d items for %d acknowledged", err, len(list.Items), len(acked))
	}
	deleted := 0
	for i, name := range order {
		if i%2 == 1 {
			if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s while the disk is full: %v", name, err)
			}
			delete(acked, name)
			deleted++
		}
	}
	t.Logf("%d deletes through the API while the disk was full", deleted)

	// The operator frees space: writes resume by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	until(t, 30*time.Second, "writes resume once there is space", func() (bool, error) {
		err := create("after", []byte("x"))
		return err == nil, err
	})
	acked["after"] = []byte("x")
	t.Logf("writes resumed %v after the space was freed", time.Since(freed).Round(time.Millisecond))
	if code, body, err := s.readyz(t); err != nil || code != http.StatusOK || !strings.Contains(body, "[+]datastore-disk ok") {
		t.Errorf("/readyz after: %d %v\n%s", code, err, body)
	}
	if got := metricValue(t, cs, "sqlkube_store_disk_full"); got != "0" {
		t.Errorf("sqlkube_store_disk_full %q after, want 0", got)
	}
	if st, err := os.Stat(filepath.Join(fs, "state.db-reserve")); err != nil || st.Size() != reserve {
		t.Errorf("reserve file after: %v, %v; want %d bytes again", st, err, reserve)
	}
	if s.cmd.ProcessState != nil || s.cmd.Process.Pid != pid {
		t.Fatalf("the server restarted")
	}

	// Nothing acknowledged is lost.
	list, err = cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.BinaryData["v"]
	}
	for name, val := range acked {
		if !bytes.Equal(got[name], val) {
			t.Errorf("acknowledged configmap %s lost or changed", name)
		}
	}
	t.Logf("%d acknowledged configmaps listed; the server said:\n%s", len(acked), s.logLines(10, "disk", "reserve"))
}
