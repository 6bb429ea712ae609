package ociregistry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sqlkube/sqlkube/node/images"
)

func TestMain(m *testing.M) {
	// containerd's resolver logs every host it gives up on.
	log.L.Logger.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// writeImage writes img's archive into dir and returns its path.
func writeImage(t *testing.T, dir string, img images.Image) string {
	t.Helper()
	p := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.Name)+".tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := images.WriteArchive(f, img); err != nil {
		t.Fatal(err)
	}
	return p
}

func testImage(name string, gzip bool, content string) images.Image {
	return images.Image{Name: name, Gzip: gzip, Cmd: []string{"/bin/tool"}, Files: []images.File{
		{Path: "/bin/tool", Data: []byte(content), Mode: 0o755},
		{Path: "/etc/motd", Data: []byte("hello from " + name + "\n")},
	}}
}

// recorder records the requests a handler gets.
type recorder struct {
	h    http.Handler
	mu   sync.Mutex
	urls []*url.URL
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL)
	r.mu.Unlock()
	r.h.ServeHTTP(w, req)
}

// serve opens archives and serves them on a loopback port until the test
// ends.
func serve(t *testing.T, archives ...string) (*Registry, *httptest.Server, *recorder) {
	t.Helper()
	reg, err := Open(archives...)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{h: reg}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() {
		srv.Close()
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	return reg, srv, rec
}

// hostsDir writes a containerd hosts directory that sends the registry
// hosts given to the registry at url (plain HTTP, pull and resolve), as
// a node's --registry-config-dir holds it.
func hostsDir(t *testing.T, url string, hosts ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, h := range hosts {
		if err := os.MkdirAll(filepath.Join(dir, h), 0o755); err != nil {
			t.Fatal(err)
		}
		toml := "server = \"" + url + "\"\ncapabilities = [\"pull\", \"resolve\"]\n"
		if err := os.WriteFile(filepath.Join(dir, h, "hosts.toml"), []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// pull resolves ref with containerd's resolver and fetches what it names
// with containerd's fetcher, as a pull does (without unpacking): the
// manifest, its config and layers. Every blob's digest is checked. It
// returns the manifest's descriptor and the layers' bytes.
func pull(t *testing.T, resolver remotes.Resolver, ref string) (ocispec.Descriptor, [][]byte) {
	t.Helper()
	ctx := context.Background()
	name, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		t.Fatalf("resolve %s: %v", ref, err)
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(d ocispec.Descriptor) []byte {
		t.Helper()
		rc, err := fetcher.Fetch(ctx, d)
		if err != nil {
			t.Fatalf("fetch %s of %s: %v", d.Digest, ref, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		if got := digest.FromBytes(b); got != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("fetched %s (%d bytes), want %s (%d bytes)", got, len(b), d.Digest, d.Size)
		}
		return b
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(fetch(desc), &m); err != nil {
		t.Fatal(err)
	}
	if desc.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("%s resolved to media type %q", ref, desc.MediaType)
	}
	var config ocispec.Image
	if err := json.Unmarshal(fetch(m.Config), &config); err != nil || config.OS != "linux" {
		t.Errorf("config of %s: %+v, %v", ref, config, err)
	}
	var layers [][]byte
	for _, l := range m.Layers {
		layers = append(layers, fetch(l))
	}
	return desc, layers
}

// TestRegistry_ContainerdPullsThroughHostsDir: containerd's resolver and
// fetcher, configured by a hosts directory as the CRI plugin's
// config_path is, pull images of two registry hosts (one gzip-compressed)
// from one registry, which gets the ns parameter of a mirror.
func TestRegistry_ContainerdPullsThroughHostsDir(t *testing.T) {
	dir := t.TempDir()
	agnhost := writeImage(t, dir, testImage("registry.k8s.io/e2e-test-images/agnhost:2.66.1", true, "agnhost"))
	pause := writeImage(t, dir, testImage("registry.k8s.io/pause:3.10.2", false, "pause"))
	tool := writeImage(t, dir, testImage("example.test:5000/tools/tool:1", false, "tool"))
	_, srv, rec := serve(t, agnhost, pause, tool)
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: hostsFrom(hostsDir(t, srv.URL, "registry.k8s.io", "example.test_5000_"))})

	desc, layers := pull(t, resolver, "registry.k8s.io/e2e-test-images/agnhost:2.66.1")
	if len(layers) != 1 || !bytes.HasPrefix(layers[0], []byte{0x1f, 0x8b}) {
		t.Errorf("agnhost's layer is not the gzip-compressed one")
	}
	pull(t, resolver, "registry.k8s.io/pause:3.10.2")
	pull(t, resolver, "example.test:5000/tools/tool:1")
	// By digest, as the kubelet pulls an image a pod names by digest.
	if got, _ := pull(t, resolver, "registry.k8s.io/e2e-test-images/agnhost@"+desc.Digest.String()); got.Digest != desc.Digest {
		t.Errorf("by digest: %s, want %s", got.Digest, desc.Digest)
	}
	seen := map[string]bool{}
	for _, u := range rec.urls {
		seen[u.Query().Get("ns")] = true
	}
	if !seen["registry.k8s.io"] || !seen["example.test:5000"] || seen[""] {
		t.Errorf("requests' ns parameters: %v, want registry.k8s.io and example.test:5000 on every request", seen)
	}

	// A name the registry does not have: not found, as from a registry.
	if _, _, err := resolver.Resolve(context.Background(), "registry.k8s.io/e2e-test-images/agnhost:9.9"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("resolve a tag that is not here: %v", err)
	}
	// The same path under another registry host is another repository.
	other := docker.NewResolver(docker.ResolverOptions{Hosts: hostsFrom(hostsDir(t, srv.URL, "quay.io"))})
	if _, _, err := other.Resolve(context.Background(), "quay.io/e2e-test-images/agnhost:2.66.1"); err == nil {
		t.Error("quay.io's agnhost resolved to registry.k8s.io's")
	}
}

// TestRegistry_ContainerdPullsByAddress: pulled from the registry's own
// address (as `ctr images pull --plain-http HOST:PORT/NAME:TAG`), a name
// is the repository's path when one registry host has it, or HOST/PATH.
func TestRegistry_ContainerdPullsByAddress(t *testing.T) {
	dir := t.TempDir()
	_, srv, _ := serve(t, writeImage(t, dir, testImage("registry.k8s.io/e2e-test-images/agnhost:2.66.1", false, "a")),
		writeImage(t, dir, testImage("busybox:1.37", false, "b")))
	addr := strings.TrimPrefix(srv.URL, "http://")
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts))})
	pull(t, resolver, addr+"/e2e-test-images/agnhost:2.66.1")
	pull(t, resolver, addr+"/registry.k8s.io/e2e-test-images/agnhost:2.66.1")
	pull(t, resolver, addr+"/library/busybox:1.37")
	pull(t, resolver, addr+"/docker.io/library/busybox:1.37")
}

// TestRegistry_Headers: what a client reads besides the body: media type,
// digest and length of manifests (HEAD too, without a body), ranges of
// blobs.
func TestRegistry_Headers(t *testing.T) {
	dir := t.TempDir()
	p := writeImage(t, dir, testImage("registry.k8s.io/pause:3.10.2", false, "pause"))
	_, srv, _ := serve(t, p)
	get := func(method, path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}

	resp, body := get(http.MethodGet, "/v2/")
	if resp.StatusCode != 200 || string(body) != "{}" || resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" {
		t.Errorf("GET /v2/: %s %q %v", resp.Status, body, resp.Header)
	}
	resp, manifest := get(http.MethodGet, "/v2/pause/manifests/3.10.2?ns=registry.k8s.io")
	sum := sha256.Sum256(manifest)
	d := "sha256:" + hex.EncodeToString(sum[:])
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != mediaTypeOCIManifest || resp.Header.Get("Docker-Content-Digest") != d {
		t.Errorf("GET manifest: %s, Content-Type %q, Docker-Content-Digest %q (its bytes are %s)",
			resp.Status, resp.Header.Get("Content-Type"), resp.Header.Get("Docker-Content-Digest"), d)
	}
	resp, body = get(http.MethodHead, "/v2/pause/manifests/3.10.2?ns=registry.k8s.io")
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(manifest)) || len(body) != 0 ||
		resp.Header.Get("Docker-Content-Digest") != d || resp.Header.Get("Content-Type") != mediaTypeOCIManifest {
		t.Errorf("HEAD manifest: %s, length %d, body %q, %v", resp.Status, resp.ContentLength, body, resp.Header)
	}
	resp, body = get(http.MethodGet, "/v2/pause/manifests/"+d)
	if resp.StatusCode != 200 || !bytes.Equal(body, manifest) {
		t.Errorf("GET manifest by digest: %s", resp.Status)
	}
	if resp, _ = get(http.MethodGet, "/v2/pause/manifests/3.10.2", "If-None-Match", `"`+d+`"`); resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET manifest If-None-Match its digest: %s", resp.Status)
	}

	var m ocispec.Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	layer := m.Layers[0]
	resp, whole := get(http.MethodGet, "/v2/pause/blobs/"+layer.Digest.String())
	if resp.StatusCode != 200 || digest.FromBytes(whole) != layer.Digest || resp.Header.Get("Docker-Content-Digest") != layer.Digest.String() ||
		resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("GET blob: %s, %v", resp.Status, resp.Header)
	}
	resp, part := get(http.MethodGet, "/v2/pause/blobs/"+layer.Digest.String(), "Range", "bytes=10-19")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, whole[10:20]) {
		t.Errorf("GET blob bytes 10-19: %s %q", resp.Status, part)
	}
	resp, body = get(http.MethodHead, "/v2/pause/blobs/"+layer.Digest.String())
	if resp.StatusCode != 200 || resp.ContentLength != layer.Size || len(body) != 0 {
		t.Errorf("HEAD blob: %s, length %d", resp.Status, resp.ContentLength)
	}
	// A manifest is a blob too.
	if resp, body = get(http.MethodGet, "/v2/pause/blobs/"+d); resp.StatusCode != 200 || !bytes.Equal(body, manifest) {
		t.Errorf("GET the manifest as a blob: %s", resp.Status)
	}
}

func TestRegistry_TagsList(t *testing.T) {
	dir := t.TempDir()
	var archives []string
	for _, tag := range []string{"1.0", "2.0", "3.0"} {
		archives = append(archives, writeImage(t, dir, testImage("registry.k8s.io/e2e-test-images/nginx:"+tag, false, tag)))
	}
	_, srv, _ := serve(t, archives...)
	for _, c := range []struct{ query, want, link string }{
		{"", `{"name":"e2e-test-images/nginx","tags":["1.0","2.0","3.0"]}`, ""},
		{"?n=2", `{"name":"e2e-test-images/nginx","tags":["1.0","2.0"]}`, `</v2/e2e-test-images/nginx/tags/list?last=2.0&n=2>; rel="next"`},
		{"?n=2&last=2.0", `{"name":"e2e-test-images/nginx","tags":["3.0"]}`, ""},
		{"?last=3.0", `{"name":"e2e-test-images/nginx","tags":[]}`, ""},
	} {
		resp, err := http.Get(srv.URL + "/v2/e2e-test-images/nginx/tags/list" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != c.want || resp.Header.Get("Link") != c.link {
			t.Errorf("tags/list%s: %s %s, Link %q; want %s, Link %q", c.query, resp.Status, b, resp.Header.Get("Link"), c.want, c.link)
		}
	}
}

// TestRegistry_BadRequests: what is malformed, not here or not a read is
// a 4xx with the specification's error code, never a 5xx.
func TestRegistry_BadRequests(t *testing.T) {
	dir := t.TempDir()
	_, srv, _ := serve(t, writeImage(t, dir, testImage("registry.k8s.io/e2e-test-images/agnhost:2.66.1", false, "a")),
		writeImage(t, dir, testImage("quay.io/e2e-test-images/agnhost:2.66.1", false, "q")))
	zero := "sha256:" + strings.Repeat("0", 64)
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"PUT", "/v2/e2e-test-images/agnhost/manifests/2.66.1", 405, codeUnsupported},
		{"POST", "/v2/e2e-test-images/agnhost/blobs/uploads/", 405, codeUnsupported},
		{"DELETE", "/v2/e2e-test-images/agnhost/manifests/" + zero, 405, codeUnsupported},
		{"PATCH", "/v2/", 405, codeUnsupported},
		{"GET", "/", 404, codeUnsupported},
		{"GET", "/v2/_catalog", 404, codeUnsupported},
		{"GET", "/v2/e2e-test-images/agnhost/referrers/" + zero, 404, codeUnsupported},
		{"GET", "/v2/e2e-test-images/agnhost/tags/other", 404, codeUnsupported},
		{"GET", "/v2/E2E/agnhost/manifests/2.66.1", 400, codeNameInvalid},
		{"GET", "/v2/../../etc/passwd/manifests/x", 400, codeNameInvalid},
		{"GET", "/v2//manifests/x", 400, codeNameInvalid},
		{"GET", "/v2/a//b/blobs/" + zero, 400, codeNameInvalid},
		{"GET", "/v2/nothing/here/manifests/1", 404, codeNameUnknown},
		// Two hosts have it: the request must say which.
		{"GET", "/v2/e2e-test-images/agnhost/manifests/2.66.1", 404, codeNameUnknown},
		{"GET", "/v2/e2e-test-images/agnhost/manifests/2.66.1?ns=docker.io", 404, codeNameUnknown},
		{"GET", "/v2/e2e-test-images/agnhost/manifests/9.9?ns=quay.io", 404, codeManifestUnknown},
		{"GET", "/v2/e2e-test-images/agnhost/manifests/-bad-tag?ns=quay.io", 404, codeManifestUnknown},
		{"GET", "/v2/e2e-test-images/agnhost/manifests/" + zero + "?ns=quay.io", 404, codeManifestUnknown},
		{"HEAD", "/v2/e2e-test-images/agnhost/manifests/" + zero + "?ns=quay.io", 404, ""},
		{"GET", "/v2/e2e-test-images/agnhost/manifests/sha256:abc?ns=quay.io", 400, codeDigestInvalid},
		{"GET", "/v2/e2e-test-images/agnhost/manifests/md5:" + strings.Repeat("0", 32) + "?ns=quay.io", 400, codeDigestInvalid},
		{"GET", "/v2/e2e-test-images/agnhost/blobs/" + zero + "?ns=quay.io", 404, codeBlobUnknown},
		{"GET", "/v2/e2e-test-images/agnhost/blobs/" + strings.ToUpper(zero) + "?ns=quay.io", 400, codeDigestInvalid},
		{"GET", "/v2/e2e-test-images/agnhost/blobs/latest?ns=quay.io", 400, codeDigestInvalid},
		{"GET", "/v2/registry.k8s.io/e2e-test-images/agnhost/tags/list?n=-1", 400, codeUnsupported},
		{"GET", "/v2/registry.k8s.io/e2e-test-images/agnhost/tags/list?n=many", 400, codeUnsupported},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = c.path // as sent: no cleaning of .. or //
		if i := strings.Index(c.path, "?"); i >= 0 {
			req.URL.Opaque, req.URL.RawQuery = c.path[:i], c.path[i+1:]
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Errors []struct{ Code, Message string }
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = json.Unmarshal(b, &body)
		code := ""
		if len(body.Errors) == 1 {
			code = body.Errors[0].Code
		}
		if resp.StatusCode != c.status || code != c.code {
			t.Errorf("%s %s: %s %s, want %d %s", c.method, c.path, resp.Status, b, c.status, c.code)
		}
	}
}

// FuzzRegistry_ServeHTTP: no path or query makes the registry fail
// (a 5xx) or panic. `go test` runs the seeds; `go test -fuzz` more.
func FuzzRegistry_ServeHTTP(f *testing.F) {
	dir := f.TempDir()
	p := filepath.Join(dir, "a.tar")
	file, err := os.Create(p)
	if err != nil {
		f.Fatal(err)
	}
	if err := images.WriteArchive(file, testImage("registry.k8s.io/e2e-test-images/agnhost:2.66.1", false, "a")); err != nil {
		f.Fatal(err)
	}
	file.Close()
	reg, err := Open(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { reg.Close() })
	for _, seed := range []string{
		"/v2/", "/v2/e2e-test-images/agnhost/manifests/2.66.1", "/v2/e2e-test-images/agnhost/blobs/sha256:x",
		"/v2/e2e-test-images/agnhost/tags/list?n=1&last=", "/v2/a/manifests/", "/v2/manifests/x", "/v2/x/blobs//",
		"/v2/registry.k8s.io/e2e-test-images/agnhost/manifests/2.66.1?ns=%00", "/v2/%2e%2e/manifests/1",
	} {
		f.Add("GET", seed, "bytes=0-1")
	}
	f.Fuzz(func(t *testing.T, method, target, rng string) {
		u, err := url.Parse(target)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			return
		}
		req := &http.Request{Method: method, URL: u, Header: http.Header{"Range": {rng}}}
		w := httptest.NewRecorder()
		reg.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Errorf("%s %s: %d %s", method, target, w.Code, w.Body)
		}
	})
}

// tarOf writes an archive of the entries given, in order.
func tarOf(t *testing.T, entries ...[2]string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e[0], Size: int64(len(e[1])), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "a.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobEntry(s string) [2]string {
	return [2]string{"blobs/sha256/" + strings.TrimPrefix(sha(s), "sha256:"), s}
}

// TestOpen_BadArchives: an archive that cannot be served is refused at
// Open with a line that says why.
func TestOpen_BadArchives(t *testing.T) {
	config := `{"os":"linux","architecture":"amd64"}`
	layer := "layer bytes"
	manifestOf := func(layerSize int) string {
		return `{"schemaVersion":2,"mediaType":"` + mediaTypeOCIManifest + `","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + sha(config) + `","size":` + itoa(len(config)) +
			`},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"` + sha(layer) + `","size":` + itoa(layerSize) + `}]}`
	}
	good := manifestOf(len(layer))
	indexOf := func(manifest, name string, size int) string {
		return `{"schemaVersion":2,"manifests":[{"mediaType":"` + mediaTypeOCIManifest + `","digest":"` + sha(manifest) + `","size":` + itoa(size) +
			`,"annotations":{"io.containerd.image.name":"` + name + `"}}]}`
	}
	gz := filepath.Join(t.TempDir(), "gz.tar.gz")
	if err := os.WriteFile(gz, []byte{0x1f, 0x8b, 8, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	notTar := filepath.Join(t.TempDir(), "x.tar")
	if err := os.WriteFile(notTar, bytes.Repeat([]byte("not a tar "), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		archive    string
	}{
		{"missing", "no such file", filepath.Join(t.TempDir(), "missing.tar")},
		{"gzip", "gunzip", gz},
		{"not a tar", "not a tar", notTar},
		{"no index", "no index.json", tarOf(t, blobEntry(good))},
		{"bad index", "index.json", tarOf(t, [2]string{"index.json", "{"})},
		{"no name", "names no image", tarOf(t, [2]string{"index.json", `{"manifests":[{"digest":"` + sha(good) + `","size":1,"annotations":{"org.opencontainers.image.ref.name":"1.0"}}]}`})},
		{"bad name", "invalid repository name", tarOf(t, [2]string{"index.json", indexOf(good, "registry.k8s.io/Pause:1", len(good))})},
		{"no manifest", "is not in the archive", tarOf(t, [2]string{"index.json", indexOf(good, "registry.k8s.io/pause:1", len(good))})},
		{"manifest size", "its descriptor says", tarOf(t, [2]string{"index.json", indexOf(good, "registry.k8s.io/pause:1", 3)}, blobEntry(good))},
		{"manifest digest", "its bytes have digest", tarOf(t, [2]string{"index.json", indexOf(good, "registry.k8s.io/pause:1", len(good))},
			[2]string{"blobs/sha256/" + strings.TrimPrefix(sha(good), "sha256:"), strings.ToUpper(good)})},
		{"no layer", "is not in the archive", tarOf(t, [2]string{"index.json", indexOf(good, "registry.k8s.io/pause:1", len(good))}, blobEntry(good), blobEntry(config))},
		{"layer size", "says 99", tarOf(t, [2]string{"index.json", indexOf(manifestOf(99), "registry.k8s.io/pause:1", len(manifestOf(99)))},
			blobEntry(manifestOf(99)), blobEntry(config), blobEntry(layer))},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg, err := Open(c.archive)
			if err == nil {
				reg.Close()
				t.Fatalf("Open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Open: %v, want one line about %q", err, c.want)
			}
		})
	}
	// The same archive twice is fine; the same name for two images is not.
	ok := tarOf(t, [2]string{"index.json", indexOf(good, "registry.k8s.io/pause:1", len(good))}, blobEntry(good), blobEntry(config), blobEntry(layer))
	reg, err := Open(ok, ok)
	if err != nil {
		t.Fatalf("the same archive twice: %v", err)
	}
	if got := reg.Images(); len(got) != 1 || got[0] != "registry.k8s.io/pause:1" {
		t.Errorf("Images() = %v", got)
	}
	reg.Close()
	dir := t.TempDir()
	_, err = Open(writeImage(t, dir, testImage("registry.k8s.io/pause:1", false, "one")), ok)
	if err == nil || !strings.Contains(err.Error(), "in an archive before") {
		t.Errorf("two images named registry.k8s.io/pause:1: %v", err)
	}
	if _, err := Open(tarOf(t, [2]string{"index.json", `{"manifests":[]}`})); !errors.Is(err, ErrNoImage) {
		t.Errorf("an empty index: %v", err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestOpen_Index: an archive whose image is a multi-platform index with
// one platform's manifest in it (as `ctr export` of a pulled image
// writes) serves the index and that manifest.
func TestOpen_Index(t *testing.T) {
	config, layer := `{"os":"linux","architecture":"amd64"}`, "layer"
	manifest := `{"schemaVersion":2,"mediaType":"` + mediaTypeOCIManifest + `","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + sha(config) + `","size":` + itoa(len(config)) +
		`},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"` + sha(layer) + `","size":` + itoa(len(layer)) + `}]}`
	missing := "sha256:" + strings.Repeat("1", 64)
	index := `{"schemaVersion":2,"mediaType":"` + mediaTypeOCIIndex + `","manifests":[` +
		`{"mediaType":"` + mediaTypeOCIManifest + `","digest":"` + sha(manifest) + `","size":` + itoa(len(manifest)) + `,"platform":{"os":"linux","architecture":"amd64"}},` +
		`{"mediaType":"` + mediaTypeOCIManifest + `","digest":"` + missing + `","size":500,"platform":{"os":"linux","architecture":"arm64"}}]}`
	top := `{"schemaVersion":2,"manifests":[{"mediaType":"` + mediaTypeOCIIndex + `","digest":"` + sha(index) + `","size":` + itoa(len(index)) +
		`,"annotations":{"io.containerd.image.name":"docker.io/library/busybox:1.37"}}]}`
	_, srv, _ := serve(t, tarOf(t, [2]string{"./index.json", top}, blobEntry(index), blobEntry(manifest), blobEntry(config), blobEntry(layer)))
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: hostsFrom(hostsDir(t, srv.URL, "docker.io"))})
	name, desc, err := resolver.Resolve(context.Background(), "docker.io/library/busybox:1.37")
	if err != nil {
		t.Fatal(err)
	}
	if desc.MediaType != mediaTypeOCIIndex || desc.Digest.String() != sha(index) {
		t.Errorf("resolved %+v", desc)
	}
	fetcher, _ := resolver.Fetcher(context.Background(), name)
	rc, err := fetcher.Fetch(context.Background(), ocispec.Descriptor{MediaType: mediaTypeOCIManifest, Digest: digest.Digest(sha(manifest)), Size: int64(len(manifest))})
	if err != nil {
		t.Fatalf("fetch the amd64 manifest: %v", err)
	}
	rc.Close()
	// The fetcher opens lazily: the error comes with the first read.
	rc, err = fetcher.Fetch(context.Background(), ocispec.Descriptor{MediaType: mediaTypeOCIManifest, Digest: digest.Digest(missing), Size: 500})
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("fetch the arm64 manifest, which is not in the archive: %v", err)
	}
}

// hostsFrom configures containerd's resolver with the hosts directory dir.
func hostsFrom(dir string) docker.RegistryHosts {
	return config.ConfigureHosts(context.Background(), config.HostOptions{HostDir: config.HostDirFromRoot(dir)})
}

func TestParseImageName(t *testing.T) {
	for ref, want := range map[string]imageName{
		"registry.k8s.io/e2e-test-images/agnhost:2.66.1": {"registry.k8s.io", "e2e-test-images/agnhost", "2.66.1", ""},
		"registry.k8s.io/pause":                          {"registry.k8s.io", "pause", "latest", ""},
		"busybox:1.37":                                   {"docker.io", "library/busybox", "1.37", ""},
		"index.docker.io/me/tool":                        {"docker.io", "me/tool", "latest", ""},
		"me/tool:1":                                      {"docker.io", "me/tool", "1", ""},
		"localhost/tool:1":                               {"localhost", "tool", "1", ""},
		"example.test:5000/a/b:c@sha256:" + strings.Repeat("a", 64): {"example.test:5000", "a/b", "c", "sha256:" + strings.Repeat("a", 64)},
		"example.test:5000/a/b@sha256:" + strings.Repeat("a", 64):   {"example.test:5000", "a/b", "", "sha256:" + strings.Repeat("a", 64)},
	} {
		got, err := parseImageName(ref)
		if err != nil || got != want {
			t.Errorf("parseImageName(%q) = %+v, %v; want %+v", ref, got, err, want)
		}
	}
	for _, ref := range []string{"", "Busybox:1", "a/b:", "a/b:-x", "a/b@sha256:xyz", "a//b", "registry.k8s.io/"} {
		if got, err := parseImageName(ref); err == nil {
			t.Errorf("parseImageName(%q) = %+v, want an error", ref, got)
		}
	}
}
