package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// quietStartWindow is how long after its start a server's log is read
// for warnings: a healthy start says nothing at warn level or above.
const quietStartWindow = 30 * time.Second

// logLine is one JSON line of sqlkube's log (--log-format json).
type logLine struct {
	Level     string `json:"level"`
	Message   string `json:"message"`
	Component string `json:"component"`
	Process   string `json:"process"`
	Logger    string `json:"logger"`
	Error     string `json:"error"`
	raw       string
}

// allowedWarning is a warning a healthy start may log, and why.
type allowedWarning struct {
	process, message string
	why              string
}

// quietStartAllowed is the quiet-start allow-list (docs/logging.md says
// the same): warnings that ask the operator for an action, logged once.
var quietStartAllowed = []allowedWarning{
	{message: "this host runs cgroup v1, which Kubernetes deprecated",
		why: "asks the operator to move the host to cgroup v2 (the kubelet refuses v1 by default since 1.35); logged once"},
}

// serverLogLines are the JSON lines of log (other lines, such as make's,
// are skipped).
func serverLogLines(log string) []logLine {
	var out []logLine
	for _, l := range strings.Split(log, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) != nil {
			continue
		}
		ll.raw = l
		out = append(out, ll)
	}
	return out
}

// unexpectedWarnings are the lines at warn level or above that the
// allow-list does not name.
func unexpectedWarnings(lines []logLine) []string {
	var out []string
	for _, l := range lines {
		switch l.Level {
		case "warn", "error", "fatal", "panic":
		default:
			continue
		}
		allowed := false
		for _, a := range quietStartAllowed {
			if l.Process == a.process && strings.Contains(l.Message, a.message) {
				allowed = true
				break
			}
		}
		if !allowed {
			out = append(out, l.raw)
		}
	}
	return out
}

// TestQuietStart starts `sqlkube server` as `make run` does, with the
// cluster DNS and, where this machine can run one, the host's node, and
// fails on every line at warn level or above in its first 30 s that the
// allow-list does not name. (TestReadme_FirstRun checks the start
// without a node.)
func TestQuietStart(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a server's first 30 s")
	}
	requireNodeHost(t)
	start := time.Now()
	// The test's substitutions: free ports for the API, the cluster DNS
	// and the kubelet; the node's kube-proxy is off in tests (its ports
	// are fixed and it leaves rules in the host's network namespace).
	s := startNodeServer(t, t.TempDir(), "quiet-node", "--disable-dns=false", "--cluster-dns-port="+strconv.Itoa(freePort(t)))
	if d := quietStartWindow - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	s.stderrW.mu.Lock()
	log := s.stderr.String()
	s.stderrW.mu.Unlock()
	for _, l := range unexpectedWarnings(serverLogLines(log)) {
		// The kubelet's port is the test's --kubelet-arg=--port, which
		// the kubelet says is deprecated; a default start gives none.
		if strings.Contains(l, `"message":"Flag --port has been deprecated`) {
			continue
		}
		t.Errorf("a healthy start logged, not on the quiet-start allow-list: %s", l)
	}
}

// TestQuietStart_AllowList keeps the allow-list short and explained.
func TestQuietStart_AllowList(t *testing.T) {
	if n := len(quietStartAllowed); n >= 5 {
		t.Errorf("the quiet-start allow-list has %d entries; it must stay under 5", n)
	}
	for _, a := range quietStartAllowed {
		if a.message == "" || a.why == "" {
			t.Errorf("allow-list entry %+v: needs a message and a reason", a)
		}
	}
	lines := serverLogLines(strings.Join([]string{
		`{"level":"info","message":"serving"}`,
		`{"level":"warn","message":"something new"}`,
		`not json`,
	}, "\n"))
	if got := unexpectedWarnings(lines); len(got) != 1 || !strings.Contains(got[0], "something new") {
		t.Errorf("unexpectedWarnings: %v", got)
	}
	for _, a := range quietStartAllowed {
		l := fmt.Sprintf(`{"level":"warn","process":%q,"message":%q}`, a.process, "x "+a.message+" y")
		if got := unexpectedWarnings(serverLogLines(l)); len(got) != 0 {
			t.Errorf("the allowed %q is reported: %v", a.message, got)
		}
	}
}
