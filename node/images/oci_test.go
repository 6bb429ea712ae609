package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readArchive returns the archive's entries by name.
func readArchive(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = data
	}
}

func TestWriteArchive_OCILayout(t *testing.T) {
	var buf bytes.Buffer
	img := Image{Name: "example.test/tool:2", Entrypoint: []string{"/bin/tool"}, Files: []File{
		{Path: "/bin/tool", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Path: "/bin/alias", Link: "tool"},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	}}
	if err := WriteArchive(&buf, img); err != nil {
		t.Fatal(err)
	}
	entries := readArchive(t, buf.Bytes())
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(entries["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != "example.test/tool:2" ||
		index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "2" {
		t.Fatalf("index: %s", entries["index.json"])
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(entries[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	config := entries[blobPath(manifest.Config.Digest)]
	if !strings.Contains(string(config), `"Entrypoint":["/bin/tool"]`) || !strings.Contains(string(config), manifest.Layers[0].Digest) {
		t.Fatalf("config %s does not name the entrypoint and the layer %s", config, manifest.Layers[0].Digest)
	}
	layer := entries[blobPath(manifest.Layers[0].Digest)]
	if digest(layer) != manifest.Layers[0].Digest {
		t.Fatal("layer digest mismatch")
	}
	got := readArchive(t, layer)
	for _, name := range []string{"bin/", "bin/tool", "bin/alias", "tmp/"} {
		if _, ok := got[name]; !ok {
			t.Errorf("layer lacks %s: %v", name, got)
		}
	}
	// The same image twice is the same archive (reproducible digests).
	var again bytes.Buffer
	if err := WriteArchive(&again, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("two archives of one image differ")
	}
	if err := WriteArchive(io.Discard, Image{}); err == nil {
		t.Fatal("an image without a name was written")
	}
}

// TestPauseProgram runs the pause program: it keeps running until SIGTERM
// or SIGINT, and then exits 0.
func TestPauseProgram(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the pause program is linux/amd64; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, PauseProgram(), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Fatalf("pause exited before a signal: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("after %v: %v", sig, err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("pause did not exit on %v", sig)
		}
	}
}
