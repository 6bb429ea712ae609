package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// layerHeaders returns the headers of the only layer of an archive, in order.
func layerHeaders(t *testing.T, archive []byte) []*tar.Header {
	t.Helper()
	entries := readArchive(t, archive)
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	if err := json.Unmarshal(entries["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(entries[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(entries[blobPath(manifest.Layers[0].Digest)]))
	var out []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
}

func TestReadTree(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "usr/bin-extra"), 0o755))
	must(os.Mkdir(filepath.Join(root, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777))
	// "usr/bin-extra/tool" is found first by a plain string sort, and
	// "usr/bin/tool" first by the layer's order: the link must name the
	// one that is written first.
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("tool"), 0o755))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin-extra/tool")))
	must(os.WriteFile(filepath.Join(root, "usr/bin/su"), []byte("su"), 0o755))
	if os.Geteuid() == 0 {
		must(os.Lchown(filepath.Join(root, "usr/bin/su"), 1234, 50000))
	}
	// After the chown, which clears the setuid bit.
	must(os.Chmod(filepath.Join(root, "usr/bin/su"), os.ModeSetuid|0o755))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(syscall.Mkfifo(filepath.Join(root, "tmp/fifo"), 0o644))

	files, err := ReadTree(root)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteArchive(&buf, Image{Name: "example.test/tree:1", Files: files, User: "1234", StopSignal: "SIGQUIT"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]*tar.Header{}
	for _, h := range layerHeaders(t, buf.Bytes()) {
		names = append(names, h.Name)
		byName[h.Name] = h
	}
	if got, want := strings.Join(names, " "), "bin tmp/ usr/ usr/bin/ usr/bin/su usr/bin/tool usr/bin-extra/ usr/bin-extra/tool"; got != want {
		t.Fatalf("layer entries:\n got %s\nwant %s", got, want)
	}
	if h := byName["bin"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/bin" {
		t.Errorf("bin: %+v", h)
	}
	if h := byName["tmp/"]; h.Mode != 0o1777 {
		t.Errorf("tmp mode %o, want 1777", h.Mode)
	}
	if h := byName["usr/bin/su"]; h.Mode != 0o4755 {
		t.Errorf("su mode %o, want 4755", h.Mode)
	} else if os.Geteuid() == 0 && (h.Uid != 1234 || h.Gid != 50000) {
		t.Errorf("su owned by %d:%d, want 1234:50000", h.Uid, h.Gid)
	}
	if h := byName["usr/bin/tool"]; h.Typeflag != tar.TypeReg || h.Size != 4 {
		t.Errorf("usr/bin/tool: %+v", h)
	}
	if h := byName["usr/bin-extra/tool"]; h.Typeflag != tar.TypeLink || h.Linkname != "usr/bin/tool" {
		t.Errorf("usr/bin-extra/tool: %+v", h)
	}

	entries := readArchive(t, buf.Bytes())
	var config []byte
	for name, data := range entries {
		if strings.Contains(string(data), `"rootfs"`) && strings.HasPrefix(name, "blobs/") {
			config = data
		}
	}
	for _, want := range []string{`"User":"1234"`, `"StopSignal":"SIGQUIT"`} {
		if !strings.Contains(string(config), want) {
			t.Errorf("config %s lacks %s", config, want)
		}
	}
}

func TestWriteArchive_HardLinkNeedsEarlierFile(t *testing.T) {
	err := WriteArchive(io.Discard, Image{Name: "example.test/bad:1", Files: []File{
		{Path: "/a/link", HardLink: "/b/file"},
		{Path: "/b/file", Data: []byte("x")},
	}})
	if err == nil {
		t.Fatal("a hard link to a later file was written")
	}
}
