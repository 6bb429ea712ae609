package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
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

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// readyz reads GET /readyz?verbose of s (a public path: no credentials),
// returning the status code and body.
func (s *server) readyz(t *testing.T) (int, string, error) {
	t.Helper()
	return s.readyzPath(t, "/readyz?verbose")
}

// readyzPath is readyz for a path of its own (/readyz with other
// parameters).
func (s *server) readyzPath(t *testing.T, path string) (int, string, error) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(s.url + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestServer_DatabaseLoss stops the PostgreSQL a `sqlkube server` runs on
// (a private one) and starts it again: while it is down /readyz answers
// 503 with a failing etcd check that says why, and requests return
// (an error) within their timeout instead of hanging; once it is back
// the server is ready again and serves writes, with nobody restarting it.
func TestServer_DatabaseLoss(t *testing.T) {
	pg := sqltest.NewPrivatePostgres(t)
	s := startCommand(t, t.TempDir(), "server", "--datastore", pg.DSN("sqlkube"), "--controllers=-*", "--disable-scheduler")
	cs := s.clientset(t)
	ctx := context.Background()
	create := func(name string, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}
	until(t, commandTimeout, "the server is ready", func() (bool, error) {
		code, _, err := s.readyz(t)
		return code == http.StatusOK, err
	})
	if err := create("before", 10*time.Second); err != nil {
		t.Fatal(err)
	}

	pg.Stop(t, "immediate")
	down := time.Now()
	var body string
	until(t, 20*time.Second, "/readyz fails while the database is down", func() (bool, error) {
		code, b, err := s.readyz(t)
		body = b
		return code == http.StatusServiceUnavailable && strings.Contains(b, "[-]etcd failed: "), err
	})
	t.Logf("unready %v after the database stopped:\n%s", time.Since(down).Round(time.Millisecond), body)
	if !strings.Contains(body, "[+]ping ok") || !strings.Contains(body, "readyz check failed") {
		t.Errorf("/readyz body:\n%s", body)
	}
	// Requests end with an error while it is down; none hangs.
	for _, req := range []struct {
		name string
		do   func(ctx context.Context, cs kubernetes.Interface) error
	}{
		{"create", func(ctx context.Context, cs kubernetes.Interface) error {
			_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during"}}, metav1.CreateOptions{})
			return err
		}},
		{"get", func(ctx context.Context, cs kubernetes.Interface) error {
			_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{ResourceVersion: ""})
			return err
		}},
	} {
		const bound = 30 * time.Second
		rctx, cancel := context.WithTimeout(ctx, 2*bound)
		start := time.Now()
		err := req.do(rctx, cs)
		took := time.Since(start)
		cancel()
		t.Logf("%s while the database is down: %v after %v", req.name, err, took.Round(time.Millisecond))
		if took > bound {
			t.Errorf("%s took %v while the database was down, more than %v", req.name, took, bound)
		}
		if req.name == "create" && err == nil {
			t.Errorf("a create succeeded while the database was down")
		}
	}
	select {
	case err := <-s.done:
		t.Fatalf("the server exited while the database was down: %v\n%s", err, s.stderr)
	default:
	}

	pg.Start(t)
	up := time.Now()
	until(t, 60*time.Second, "/readyz passes once the database is back", func() (bool, error) {
		code, b, err := s.readyz(t)
		body = b
		return code == http.StatusOK, err
	})
	t.Logf("ready %v after the database started", time.Since(up).Round(time.Millisecond))
	until(t, 30*time.Second, "a write succeeds once the database is back", func() (bool, error) {
		err := create("after", 10*time.Second)
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	got, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, cm := range got.Items {
		names = append(names, cm.Name)
	}
	if s := fmt.Sprint(names); !strings.Contains(s, "before") || !strings.Contains(s, "after") {
		t.Errorf("configmaps after the outage: %v", names)
	}
}
