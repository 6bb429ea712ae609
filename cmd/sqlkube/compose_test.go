package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/spf13/cobra"
)

// TestCompose_File validates docker-compose.yaml (no Docker daemon runs in
// CI): it loads with compose-go as `docker compose` would, its sqlkube
// services build this repository's Dockerfile, every long-running service
// has a health check, data lives in volumes, the servers' and the node's
// commands are valid sqlkube flags, and the kubeconfig a server writes
// (DATA_DIR/kubeconfig) lands in the host directory the README points at
// and names an address the host can reach with a certificate that covers
// it.
func TestCompose_File(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yaml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(nil), cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yaml does not load: %v", err)
	}
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	if want := []string{"lb", "node", "postgres", "server-a", "server-b"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}

	for _, name := range []string{"server-a", "server-b", "node"} {
		s := p.Services[name]
		if s.Build == nil || s.Build.Context != root || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s: build %+v, want this repository's Dockerfile", name, s.Build)
		}
		if s.Image != "sqlkube:dev" {
			t.Errorf("%s: image %q, want sqlkube:dev", name, s.Image)
		}
		if u := strings.Split(s.User, ":")[0]; u == "" || u == "0" || u == "root" {
			t.Errorf("%s: runs as %q, want a non-root user", name, s.User)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "Dockerfile")); err != nil {
		t.Fatal(err)
	}
	dockerfile, _ := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if !regexp.MustCompile(`(?m)^USER 65532`).Match(dockerfile) || !strings.Contains(string(dockerfile), "CGO_ENABLED=1") ||
		!strings.Contains(string(dockerfile), "./cmd/sqlkube") {
		t.Errorf("Dockerfile: want a cgo build of ./cmd/sqlkube and a non-root final stage")
	}

	for _, name := range []string{"postgres", "server-a", "server-b", "lb"} {
		hc := p.Services[name].HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 {
			t.Errorf("%s: no health check", name)
		}
	}

	// PostgreSQL keeps its data in a named volume.
	if _, ok := p.Volumes["pgdata"]; !ok {
		t.Errorf("no pgdata volume")
	}
	if !mounts(p.Services["postgres"], types.VolumeTypeVolume, "pgdata", "/var/lib/postgresql/data") {
		t.Errorf("postgres: pgdata is not mounted at /var/lib/postgresql/data")
	}
	pg := p.Services["postgres"].Environment

	// The servers: real flags, on the database above, data dir on the host.
	hostDirs := map[string]string{}
	for _, name := range []string{"server-a", "server-b"} {
		s := p.Services[name]
		cmd := parseCommand(t, name, s.Command)
		if cmd.Name() != "server" {
			t.Fatalf("%s runs %q, want sqlkube server", name, cmd.Name())
		}
		flag := func(n string) string { return cmd.Flags().Lookup(n).Value.String() }
		ds, err := url.Parse(flag("datastore"))
		if err != nil || ds.Scheme != "postgres" || ds.Hostname() != "postgres" || ds.Path != "/"+deref(pg["POSTGRES_DB"]) ||
			ds.User.Username() != deref(pg["POSTGRES_USER"]) {
			t.Errorf("%s: --datastore %q is not the postgres service's database", name, flag("datastore"))
		}
		if pw, _ := ds.User.Password(); pw != deref(pg["POSTGRES_PASSWORD"]) {
			t.Errorf("%s: --datastore password differs from POSTGRES_PASSWORD", name)
		}
		if !dependsHealthy(s, "postgres") {
			t.Errorf("%s does not wait for postgres to be healthy", name)
		}
		dataDir := flag("data-dir")
		host := bindSource(s, dataDir)
		if host == "" {
			t.Fatalf("%s: --data-dir %s is not a host directory mount", name, dataDir)
		}
		if want := filepath.Join(root, "compose", name); host != want {
			t.Errorf("%s: data dir mounted from %s, want %s", name, host, want)
		}
		if _, err := os.Stat(filepath.Join(host, ".gitignore")); err != nil {
			t.Errorf("%s: host dir %s is not in the repository (docker would create it root-owned): %v", name, host, err)
		}
		hostDirs[name] = host
		t.Logf("%s writes its kubeconfig to %s on the host", name, filepath.Join(host, "kubeconfig"))

		port := flag("secure-port")
		if hc := strings.Join(s.HealthCheck.Test, " "); !strings.Contains(hc, "sqlkube probe https://127.0.0.1:"+port+"/readyz") {
			t.Errorf("%s: health check %q does not probe /readyz on --secure-port %s", name, hc, port)
		}
		if flag("bind-address") != "0.0.0.0" {
			t.Errorf("%s: --bind-address %s: other containers cannot reach it", name, flag("bind-address"))
		}
		// The kubeconfig's server is reachable from the host and covered
		// by the serving certificate.
		ks, err := url.Parse(flag("kubeconfig-server"))
		if err != nil || ks.Scheme != "https" {
			t.Fatalf("%s: --kubeconfig-server %q", name, flag("kubeconfig-server"))
		}
		sans := cmd.Flags().Lookup("tls-san").Value.(interface{ GetSlice() []string }).GetSlice()
		if !slices.Contains(sans, ks.Hostname()) {
			t.Errorf("%s: --tls-san %v does not cover the kubeconfig's host %s", name, sans, ks.Hostname())
		}
		front := s
		if name == "server-a" {
			front = p.Services["lb"]
		}
		if !publishes(front, ks.Hostname(), ks.Port()) {
			t.Errorf("%s: nothing publishes %s on the host", name, ks.Host)
		}
		if name == "server-b" && !publishesTo(s, ks.Port(), port) {
			t.Errorf("server-b: %s is not published to its --secure-port %s", ks.Port(), port)
		}
	}

	// Both servers give one cluster token, so they share one identity.
	tokens := map[string]bool{}
	for _, name := range []string{"server-a", "server-b"} {
		tokens[parseCommand(t, name, p.Services[name].Command).Flags().Lookup("token").Value.String()] = true
	}
	if len(tokens) != 1 || tokens[""] {
		t.Errorf("server-a and server-b give the cluster tokens %v, want one, not empty", tokens)
	}

	// lb fronts both servers.
	lb := p.Services["lb"]
	cfgPath := bindSource(lb, "/usr/local/etc/haproxy/haproxy.cfg")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatalf("lb: haproxy.cfg: %v", err)
	}
	var backends []string
	for _, line := range strings.Split(string(cfg), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "server" {
			backends = append(backends, f[2])
		}
	}
	if !slices.Equal(backends, []string{"server-a:6443", "server-b:6443"}) {
		t.Errorf("lb: backends %v, want server-a:6443 and server-b:6443", backends)
	}
	if !publishesTo(lb, "6443", "6443") || !dependsHealthy(lb, "server-a") || !dependsHealthy(lb, "server-b") {
		t.Errorf("lb: want 6443 published and both servers healthy first")
	}

	// The node: `sqlkube node --fake`, with server-a's kubeconfig, in lb's
	// network namespace so the kubeconfig's 127.0.0.1:6443 is lb.
	node := p.Services["node"]
	cmd := parseCommand(t, "node", node.Command)
	if cmd.Name() != "node" || cmd.Flags().Lookup("fake").Value.String() != "true" {
		t.Errorf("node: want sqlkube node --fake")
	}
	kc := cmd.Flags().Lookup("kubeconfig").Value.String()
	if host := bindSource(node, filepath.Dir(kc)); host != hostDirs["server-a"] || filepath.Base(kc) != "kubeconfig" {
		t.Errorf("node: --kubeconfig %s is not server-a's kubeconfig (mounted from %q)", kc, host)
	}
	if node.NetworkMode != "service:lb" {
		t.Errorf("node: network_mode %q, want service:lb", node.NetworkMode)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// parseCommand parses a service's command with sqlkube's own cobra
// commands, so a misspelt flag fails here rather than in a container.
func parseCommand(t *testing.T, name string, args []string) *cobra.Command {
	t.Helper()
	root := newRootCommand()
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Fatalf("%s: command %v: %v", name, args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%s: command %v: %v", name, args, err)
	}
	if extra := cmd.Flags().Args(); len(extra) > 0 {
		t.Fatalf("%s: command %v: stray arguments %v", name, args, extra)
	}
	return cmd
}

func mounts(s types.ServiceConfig, typ, source, target string) bool {
	for _, v := range s.Volumes {
		if v.Type == typ && v.Source == source && v.Target == target {
			return true
		}
	}
	return false
}

// bindSource is the host path mounted at target, or "".
func bindSource(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && filepath.Clean(v.Target) == filepath.Clean(target) {
			return v.Source
		}
	}
	return ""
}

func dependsHealthy(s types.ServiceConfig, on string) bool {
	d, ok := s.DependsOn[on]
	return ok && d.Condition == types.ServiceConditionHealthy
}

func publishes(s types.ServiceConfig, host, port string) bool {
	for _, p := range s.Ports {
		ip := net.ParseIP(p.HostIP)
		if p.Published == port && (p.HostIP == host || (host == "localhost" && ip != nil && ip.IsLoopback()) || p.HostIP == "" || p.HostIP == "0.0.0.0") {
			return true
		}
	}
	return false
}

func publishesTo(s types.ServiceConfig, published, target string) bool {
	for _, p := range s.Ports {
		if p.Published == published && strconv.Itoa(int(p.Target)) == target {
			return true
		}
	}
	return false
}

// TestCompose_Standins validates compose/standins.yaml, the override that
// runs the stack on the stand-in images of compose/standins/build.sh
// (make test-compose, where Docker Hub and gcr.io cannot be reached).
// With it, every image is a stand-in that build.sh builds and that says
// (its dev.sqlkube.standin-for label) it stands in for the image
// docker-compose.yaml names there, and the sqlkube image is built from the
// same Dockerfile with stand-ins for its bases, given as the Dockerfile's
// own build arguments, whose defaults stay the upstream images. Nothing
// else in the stack changes.
func TestCompose_Standins(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	load := func(files ...string) *types.Project {
		t.Helper()
		var paths []string
		for _, f := range files {
			paths = append(paths, filepath.Join(root, f))
		}
		opts, err := cli.NewProjectOptions(paths, cli.WithWorkingDirectory(root), cli.WithEnv(nil), cli.WithResolvedPaths(true))
		if err != nil {
			t.Fatal(err)
		}
		p, err := opts.LoadProject(context.Background())
		if err != nil {
			t.Fatalf("%v does not load: %v", files, err)
		}
		return p
	}
	upstream := load("docker-compose.yaml")
	standin := load("docker-compose.yaml", "compose/standins.yaml")

	script, err := os.ReadFile(filepath.Join(root, "compose", "standins", "build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// standsIn checks that build.sh builds image and that it says it
	// stands in for want: the label is in the image's Dockerfile
	// (compose/standins/NAME/Dockerfile) or, for the images build.sh
	// makes itself, in build.sh.
	standsIn := func(image, want string) {
		t.Helper()
		repo, _, _ := strings.Cut(strings.TrimPrefix(image, "sqlkube-standin/"), ":")
		if !strings.HasPrefix(image, "sqlkube-standin/") || !strings.Contains(string(script), "="+image+"\n") {
			t.Errorf("%s is not a stand-in that compose/standins/build.sh builds", image)
			return
		}
		label := `dev.sqlkube.standin-for="` + want + `"`
		src := script
		if df, err := os.ReadFile(filepath.Join(root, "compose", "standins", repo, "Dockerfile")); err == nil {
			src = df
		}
		if !strings.Contains(string(src), label) {
			t.Errorf("%s: no %s where it is built", image, label)
		}
	}

	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The ARGs before the first FROM, with their defaults, and the FROMs.
	args := map[string]string{}
	var froms []string
	for _, line := range strings.Split(string(dockerfile), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "FROM":
			froms = append(froms, f[1])
		case len(f) == 2 && f[0] == "ARG" && len(froms) == 0:
			name, def, _ := strings.Cut(f[1], "=")
			args[name] = def
		}
	}
	if want := []string{"${GO_IMAGE}", "${BASE_IMAGE}"}; !slices.Equal(froms, want) {
		t.Errorf("Dockerfile: FROM %v, want %v (the bases as build arguments)", froms, want)
	}
	if args["GO_IMAGE"] != "golang:1.26-bookworm" || args["BASE_IMAGE"] != "gcr.io/distroless/base-debian12:nonroot" {
		t.Errorf("Dockerfile: base image defaults %v, want the upstream golang and distroless images", args)
	}

	for name, s := range standin.Services {
		up := upstream.Services[name]
		if up.Build == nil {
			standsIn(s.Image, up.Image)
		} else {
			if s.Build == nil || s.Build.Context != up.Build.Context || s.Build.Dockerfile != up.Build.Dockerfile || s.Image != up.Image {
				t.Errorf("%s: build %+v, image %q, want %+v, %q as docker-compose.yaml", name, s.Build, s.Image, up.Build, up.Image)
				continue
			}
			for _, arg := range []string{"GO_IMAGE", "BASE_IMAGE"} {
				if v := deref(s.Build.Args[arg]); v == "" {
					t.Errorf("%s: no build argument %s", name, arg)
				} else {
					standsIn(v, args[arg])
				}
			}
			for arg := range s.Build.Args {
				if _, ok := args[arg]; !ok {
					t.Errorf("%s: build argument %s is not an ARG of the Dockerfile", name, arg)
				}
			}
		}
		// Nothing but the images changes.
		s.Image, up.Image, s.Build, up.Build = "", "", nil, nil
		if !reflect.DeepEqual(s, up) {
			t.Errorf("%s: compose/standins.yaml changes more than its image", name)
		}
	}
	if len(standin.Services) != len(upstream.Services) {
		t.Errorf("compose/standins.yaml adds services")
	}
}
