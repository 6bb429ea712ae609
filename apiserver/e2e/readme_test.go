package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/node/images"
)

// readmePath is the README whose quick start TestReadme_QuickStart runs.
const readmePath = "../../README.md"

// readmeScriptTimeout bounds one scenario's shell script (a rollout on a
// real node included).
const readmeScriptTimeout = 5 * time.Minute

// readmeScenario is the README's quick-start blocks of one name (the
// NAME of a "```sh quickstart=NAME" fence), in the order they appear.
type readmeScenario struct {
	name string
	// runArgs are the flags of the scenario's `make run RUN_ARGS=...`
	// line; without one the scenario runs against a plain `make run`.
	runArgs []string
	// script is every other line of its blocks, run by bash in order.
	script []string
}

// TestReadme_QuickStart runs the README's quick start as written, one
// subtest per scenario (the blocks marked ```sh quickstart=NAME):
//
//   - each scenario gets a new working directory holding bin/sqlkube (a
//     link to the binary TestMain built as `make build` does), where the
//     README's relative paths (./bin/sqlkube, ./sqlkube-data) mean what
//     they mean in a checkout;
//   - a `make run [RUN_ARGS=...]` line starts the `sqlkube server` that
//     `make run` runs (the Makefile's recipe, checked below), with the
//     README's flags, in the background: the README runs it in another
//     shell. `make run` itself is not run: it would listen on port 6443,
//     which may be taken;
//   - every other line runs in one bash script (set -e), with KUBECONFIG
//     set to the path the README's first block exports, as in the reader's
//     shell.
//
// What the test substitutes, because a test must not use fixed ports or
// leave anything on the host, and nothing else:
//
//   - the server gets --secure-port 0 (a free port; its kubeconfig names
//     it, so `export KUBECONFIG=$PWD/sqlkube-data/kubeconfig` works
//     unchanged) and --disable-dns (the cluster DNS listens on the fixed
//     port 10053), and its controller manager and scheduler serve no
//     endpoints of their own (componentPortsOff: the fixed ports 10257
//     and 10259);
//   - it runs no node of this host (--disable-node) except in the node
//     scenario, whose node is named readme-node for its cleanup, listens
//     on a free kubelet port instead of 10250, and runs no kube-proxy (its
//     ports 10256 and 10249 are fixed, and it would leave rules in the
//     host's network namespace); the other scenarios need no containers;
//   - the etcd address 127.0.0.1:2379 becomes 127.0.0.1:FREE-PORT, in the
//     server's flags and in the script alike;
//   - the node scenario's busybox.tar, which the README makes with
//     `docker save` on another machine, is written by the test from this
//     host's static busybox, named busybox:1.36 as docker save names it.
func TestReadme_QuickStart(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	checkReadmeCommands(t, string(readme))
	scenarios, err := parseQuickStart(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sc := range scenarios {
		names = append(names, sc.name)
	}
	for _, want := range []string{"kubectl", "node", "fake-nodes", "etcd"} {
		if !slices.Contains(names, want) {
			t.Errorf("the README has no quick-start blocks named %q (it has %v)", want, names)
		}
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { runReadmeScenario(t, sc) })
	}
}

// checkReadmeCommands checks the README's two commands (the ```sh commands
// block) against what they run: the Makefile's run target is the server
// TestReadme_QuickStart starts in its place, and CI (.ci/run) runs the
// README's test command.
func checkReadmeCommands(t *testing.T, readme string) {
	t.Helper()
	var blocks [][]string
	for _, b := range fencedBlocks(readme) {
		if b.info == "sh commands" {
			blocks = append(blocks, b.lines)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("the README has %d ```sh commands blocks, want 1", len(blocks))
	}
	var cmds []string
	for _, l := range blocks[0] {
		cmds = append(cmds, strings.Join(shellWords(l), " "))
	}
	if want := []string{"make run", "make test"}; !slices.Equal(cmds, want) {
		t.Errorf("the README's two commands are %q, want %q", cmds, want)
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if recipe := makeRecipe(string(makefile), "run"); !slices.Equal(recipe, []string{"./bin/sqlkube server $(RUN_ARGS)"}) {
		t.Errorf("the Makefile's run target runs %q; TestReadme_QuickStart starts `sqlkube server RUN_ARGS` in its place and must follow it", recipe)
	}
	if recipe := makeRecipe(string(makefile), "sqlkube"); len(recipe) != 1 || !strings.Contains(recipe[0], "-o bin/sqlkube ./cmd/sqlkube") {
		t.Errorf("the Makefile's sqlkube target runs %q; the README runs ./bin/sqlkube", recipe)
	}
	if !regexp.MustCompile(`(?m)^run: node-deps build$`).Match(makefile) || !regexp.MustCompile(`(?m)^build: sqlkube$`).Match(makefile) {
		t.Errorf("the Makefile's run target does not build sqlkube through build (make run: node-deps build; build: sqlkube)")
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^make test$`).Match(ci) {
		t.Errorf(".ci/run does not run the README's test command, `make test`")
	}
}

// runReadmeScenario starts the scenario's server in a new working
// directory and runs its script there.
func runReadmeScenario(t *testing.T, sc readmeScenario) {
	kubectl := kubectlPath(t)
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sqlkubeBin, filepath.Join(work, "bin", "sqlkube")); err != nil {
		t.Fatal(err)
	}
	etcdAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	subst := strings.NewReplacer("127.0.0.1:2379", etcdAddr)
	var args []string
	for _, a := range sc.runArgs {
		args = append(args, subst.Replace(a))
	}
	script := subst.Replace(strings.Join(sc.script, "\n"))

	// The data directory is make run's default, ./sqlkube-data; the
	// helpers name it explicitly.
	const dataDir = "sqlkube-data"
	var s *server
	switch sc.name {
	case "node":
		requireNodeHost(t)
		writeBusyboxArchive(t, filepath.Join(work, "busybox.tar"), "docker.io/library/busybox:1.36")
		s = startNodeServerIn(t, work, dataDir, "readme-node", args...)
	default:
		if sc.name == "etcd" {
			requireTool(t, "etcdctl", "etcd-client")
		}
		s = startCommandIn(t, work, dataDir, append([]string{"server"}, args...)...)
	}

	out := runReadmeScript(t, work, s.kubeconfig, script)

	// What the README's comments promise.
	switch sc.name {
	case "kubectl":
		if !strings.Contains(out, "kube-system") || !strings.HasSuffix(strings.TrimSpace(out), "blue") {
			t.Errorf("the kubectl block printed:\n%s", out)
		}
	case "node":
		got := s.mustKubectl(t, kubectl, "get", "pods", "-l", "app=hello", "-o",
			`jsonpath={range .items[*]}{.status.phase} {.spec.nodeName} {.spec.containers[0].image}{"\n"}{end}`)
		if strings.TrimSpace(got) != "Running readme-node busybox:1.36" {
			t.Errorf("the Deployment's pods: %q, want one Running on readme-node with busybox:1.36", got)
		}
		if pod := s.mustKubectl(t, kubectl, "get", "pods", "-l", "app=hello", "-o", "jsonpath={.items[0].metadata.name}"); !strings.Contains(out, pod) {
			t.Errorf("kubectl exec ... hostname did not print the pod's name %q:\n%s", pod, out)
		}
	case "fake-nodes":
		s.waitKubectl(t, kubectl, "fake-0=True fake-1=True fake-2=True", "get", "nodes", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		// The old ReplicaSet's pods may still be on their way out.
		re := regexp.MustCompile(`^(Running nginx:1\.27 \d+\.\d+\.\d+\.\d+ fake-[0-2]\n){3}$`)
		for deadline := time.Now().Add(commandTimeout); ; time.Sleep(200 * time.Millisecond) {
			got, _ := s.kubectl(t, kubectl, "get", "pods", "-l", "app=web", "-o",
				`jsonpath={range .items[*]}{.status.phase} {.spec.containers[0].image} {.status.podIP} {.spec.nodeName}{"\n"}{end}`)
			if re.MatchString(got) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Deployment's pods after set image, want three Running with nginx:1.27 on fake-0 … fake-2:\n%s", got)
			}
		}
	case "etcd":
		if !strings.Contains(out, "/registry/namespaces/kube-system") {
			t.Errorf("etcdctl did not list Kubernetes' namespaces:\n%s", out)
		}
	}
}

// runReadmeScript runs script with bash in dir, as the README's reader
// would in a shell where KUBECONFIG is exported, and returns its output.
func runReadmeScript(t *testing.T, dir, kubeconfig, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readmeScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("$ %s\n%s%s", strings.ReplaceAll(script, "\n", "\n$ "), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("the README's block failed: %v\n%s", err, stderr.String())
	}
	return stdout.String()
}

// writeBusyboxArchive writes an image archive of this host's static
// busybox, as `docker save` would write one, named name.
func writeBusyboxArchive(t *testing.T, path, name string) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	files := []images.File{{Path: "/bin/busybox", Data: bb, Mode: 0o755}, {Path: "/tmp", Dir: true, Mode: 0o1777}}
	for _, applet := range []string{"sh", "sleep", "hostname"} {
		files = append(files, images.File{Path: "/bin/" + applet, Link: "busybox"})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := images.WriteArchive(f, images.Image{Name: name, Files: files, Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}}); err != nil {
		t.Fatal(err)
	}
}

// requireTool skips the test (fails it under CI=true) without bin, which
// Debian's package pkg provides (make test-deps installs it as root).
func requireTool(t *testing.T, bin, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found; CI must provide it (Debian: %s)", bin, pkg)
	}
	t.Skipf("skipping: %s not found (Debian: %s)", bin, pkg)
}

// fencedBlock is a fenced code block of a Markdown file.
type fencedBlock struct {
	info  string   // the info string after the opening fence, trimmed
	lines []string // its lines, without the fences
}

// fencedBlocks returns the ``` fenced blocks of text, in order.
func fencedBlocks(text string) []fencedBlock {
	var out []fencedBlock
	var cur *fencedBlock
	for _, l := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &fencedBlock{info: strings.TrimSpace(strings.TrimPrefix(l, "```"))}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	return out
}

// parseQuickStart returns the README's quick-start scenarios in the order
// their first blocks appear.
func parseQuickStart(readme string) ([]readmeScenario, error) {
	var out []readmeScenario
	index := map[string]int{}
	for _, b := range fencedBlocks(readme) {
		f := strings.Fields(b.info)
		if len(f) != 2 || f[0] != "sh" || !strings.HasPrefix(f[1], "quickstart=") {
			continue
		}
		name := strings.TrimPrefix(f[1], "quickstart=")
		i, ok := index[name]
		if !ok {
			i = len(out)
			index[name] = i
			out = append(out, readmeScenario{name: name})
		}
		sc := &out[i]
		for _, l := range b.lines {
			w := shellWords(l)
			switch {
			case len(w) == 0:
			case len(w) >= 2 && w[0] == "make" && w[1] == "run":
				if sc.runArgs != nil {
					return nil, fmt.Errorf("quick start %q: a second make run line: %q", name, l)
				}
				sc.runArgs = []string{}
				for _, a := range w[2:] {
					v, ok := strings.CutPrefix(a, "RUN_ARGS=")
					if !ok {
						return nil, fmt.Errorf("quick start %q: %q: only RUN_ARGS= is understood after make run", name, l)
					}
					// make puts $(RUN_ARGS) into the recipe unquoted: the
					// shell splits it into words.
					sc.runArgs = append(sc.runArgs, strings.Fields(v)...)
				}
			case w[0] == "make":
				return nil, fmt.Errorf("quick start %q: %q: only make run is understood", name, l)
			default:
				sc.script = append(sc.script, l)
			}
		}
	}
	return out, nil
}

// shellWords splits a shell command line into words as sh does for the
// README's simple lines: blanks separate words, single and double quotes
// group (no escapes or expansions inside), and an unquoted # at the
// start of a word begins a comment.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '#' && !inWord:
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// makeRecipe returns the recipe lines of target in a Makefile, trimmed.
func makeRecipe(makefile, target string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(makefile, "\n") {
		switch {
		case strings.HasPrefix(l, target+":"):
			in = true
		case in && strings.HasPrefix(l, "\t"):
			out = append(out, strings.TrimSpace(l))
		case in:
			return out
		}
	}
	return out
}
