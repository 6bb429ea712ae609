package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/node/images"
)

// TestRealNode_RegistryMirror: a node started with --registry-config-dir
// pulls through the mirror its hosts.toml names, here `sqlkube registry
// serve` over an image archive, as the conformance harness serves its
// images. A pod with imagePullPolicy Always runs whether its image is
// there yet or not: each start resolves the tag at the mirror (the
// conformance tests that pull Always need this), and a tag the mirror
// lacks fails the pull with the mirror's not-found.
func TestRealNode_RegistryMirror(t *testing.T) {
	requireNodeHost(t)
	const repo = "registry.sqlkube.test/e2e/busybox"
	// Not testImage's content, which the node has: this one's blobs come
	// from the mirror.
	const marker = "pulled through the mirror"
	reg := startRegistry(t, writeBusyboxImage(t, repo+":pull", images.File{Path: "/etc/mirror", Data: []byte(marker + "\n")}))
	hosts := t.TempDir()
	if err := os.Mkdir(filepath.Join(hosts, "registry.sqlkube.test"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(hosts, "registry.sqlkube.test", "hosts.toml"),
		"server = \""+reg.url+"\"\ncapabilities = [\"pull\", \"resolve\"]\n")
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), "e2e-registry", "--registry-config-dir", hosts)
	k := kubectlPath(t)
	cfg, err := os.ReadFile(filepath.Join(s.dataDir, "containerd", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `config_path = "` + hosts + `"`; !strings.Contains(string(cfg), want) {
		t.Errorf("containerd's configuration lacks %s:\n%s", want, cfg)
	}

	// The first pod pulls the image (it is not on the node), the second
	// resolves the tag again, as Always asks.
	resolves := 0
	for i, name := range []string{"pulled", "again"} {
		s.mustKubectl(t, k, "apply", "-f", podManifest(t, `apiVersion: v1
kind: Pod
metadata: {name: `+name+`}
spec:
  nodeName: e2e-registry
  containers:
  - {name: c, image: `+repo+`:pull, imagePullPolicy: Always, command: [sh, -c, "cat /etc/mirror; exec sleep 3600"]}
`))
		s.mustKubectl(t, k, "wait", "--for=jsonpath={.status.phase}=Running", "pod/"+name, "--timeout=90s")
		s.waitKubectl(t, k, marker, "logs", name)
		n := len(reg.requests(t, "/v2/e2e/busybox/manifests/pull", 200))
		if n <= resolves {
			t.Errorf("pod %s started without the node asking the mirror for the tag; the registry's log:\n%s", name, reg.log())
		}
		resolves = n
		if i == 0 && len(reg.requests(t, "/v2/e2e/busybox/blobs/", 200)) == 0 {
			t.Errorf("the node fetched no blob from the mirror; the registry's log:\n%s", reg.log())
		}
	}

	// A tag the mirror lacks: not found, from the mirror.
	s.mustKubectl(t, k, "apply", "-f", podManifest(t, `apiVersion: v1
kind: Pod
metadata: {name: missing}
spec:
  nodeName: e2e-registry
  containers:
  - {name: c, image: `+repo+`:missing, imagePullPolicy: Always, command: [sleep, "3600"]}
`))
	waitFor(t, 60*time.Second, "the pull of a tag the mirror lacks to fail", func() bool {
		out, _ := s.kubectl(t, k, "get", "events", "--field-selector", "involvedObject.name=missing", "-o", "jsonpath={.items[*].message}")
		return strings.Contains(out, repo+":missing: not found")
	})
	if len(reg.requests(t, "/v2/e2e/busybox/manifests/missing", 404)) == 0 {
		t.Errorf("the mirror was not asked for the missing tag; its log:\n%s", reg.log())
	}
}

// registryProcess is a running `sqlkube registry serve`.
type registryProcess struct {
	url    string
	cmd    *exec.Cmd
	stderr *lockedWriter
	buf    *bytes.Buffer
}

// startRegistry runs `sqlkube registry serve` on a free loopback port
// with the archives given; at cleanup it is stopped with SIGTERM and must
// exit 0.
func startRegistry(t *testing.T, archives ...string) *registryProcess {
	t.Helper()
	r := &registryProcess{buf: &bytes.Buffer{}}
	r.stderr = &lockedWriter{w: r.buf}
	r.cmd = exec.Command(sqlkubeBin, append([]string{"registry", "serve", "--listen", "127.0.0.1:0", "--log-format", "json"}, archives...)...)
	r.cmd.Stderr = r.stderr
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("sqlkube registry serve exited with %v after SIGTERM\n%s", err, r.log())
			}
		case <-time.After(stopTimeout):
			_ = r.cmd.Process.Kill()
			<-done
			t.Errorf("sqlkube registry serve did not stop within %v of SIGTERM", stopTimeout)
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), " images on "); ok && strings.HasPrefix(sc.Text(), "sqlkube registry: serving ") {
				urls <- u
			}
		}
	}()
	select {
	case r.url = <-urls:
	case <-time.After(startTimeout):
		t.Fatalf("sqlkube registry serve did not start within %v\n%s", startTimeout, r.log())
	}
	return r
}

func (r *registryProcess) log() string {
	r.stderr.mu.Lock()
	defer r.stderr.mu.Unlock()
	return r.buf.String()
}

// requests are the requests for registry.sqlkube.test (a mirror's ns
// parameter) the registry logged whose path begins with prefix and that
// it answered with status.
func (r *registryProcess) requests(t *testing.T, prefix string, status int) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(r.log(), "\n") {
		var e struct {
			Message, Method, Path, NS string
			Status                    int
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Message != "request" {
			continue
		}
		if e.NS == "registry.sqlkube.test" && strings.HasPrefix(e.Path, prefix) && e.Status == status {
			out = append(out, e.Method+" "+e.Path)
		}
	}
	return out
}
