package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/internal/testlog"
	"github.com/sqlkube/sqlkube/node/images"
)

// TestServeRegistry: `sqlkube registry serve` serves an archive on a free
// port, logs each request with the mirror's ns and the status, and stops
// cleanly when its context ends.
func TestServeRegistry(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "pause.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := images.WriteArchive(f, images.PauseImage("registry.k8s.io/pause:3.10.2")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var logs testlog.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveRegistry(ctx, "127.0.0.1:0", []string{archive}, zerolog.New(&logs), func(addr string, n int) {
			if n != 1 {
				t.Errorf("serving %d images, want 1", n)
			}
			addrs <- addr
		})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("serveRegistry: %v", err)
	}
	for path, want := range map[string]int{"/v2/pause/manifests/3.10.2?ns=registry.k8s.io": 200, "/v2/pause/manifests/3.9?ns=registry.k8s.io": 404} {
		resp, err := http.Head("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("HEAD %s: %s, want %d", path, resp.Status, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serveRegistry after its context ended: %v", err)
	}
	var statuses []int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry struct {
			Message, Method, Path, NS string
			Status                    int
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if entry.Message == "request" {
			if entry.Method != "HEAD" || !strings.HasPrefix(entry.Path, "/v2/pause/manifests/") || entry.NS != "registry.k8s.io" {
				t.Errorf("request logged as %s", line)
			}
			statuses = append(statuses, entry.Status)
		}
	}
	if len(statuses) != 2 || statuses[0]+statuses[1] != 200+404 {
		t.Errorf("logged statuses %v, want 200 and 404:\n%s", statuses, logs.String())
	}
}

// TestServeRegistry_BadArchive: an archive that cannot be served stops it
// at once with one line.
func TestServeRegistry_BadArchive(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.tar")
	if err := os.WriteFile(bad, []byte("not a tar"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := serveRegistry(context.Background(), "127.0.0.1:0", []string{bad}, zerolog.Nop(), func(string, int) { t.Error("ready with a bad archive") })
	if err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "\n") {
		t.Errorf("serveRegistry with a bad archive: %v", err)
	}
}
