package images

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"testing"
)

func TestWriteArchive_Gzip(t *testing.T) {
	img := Image{Name: "example.test/zipped:1", Gzip: true, Files: []File{
		{Path: "/bin/tool", Data: bytes.Repeat([]byte("compressible "), 1000), Mode: 0o755},
	}}
	var buf bytes.Buffer
	if err := WriteArchive(&buf, img); err != nil {
		t.Fatal(err)
	}
	entries := readArchive(t, buf.Bytes())
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	if err := json.Unmarshal(entries["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Config struct{ Digest string } `json:"config"`
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
			Size      int    `json:"size"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(entries[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatal(err)
	}
	l := manifest.Layers[0]
	if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("layer media type %s", l.MediaType)
	}
	blob := entries[blobPath(l.Digest)]
	if digest(blob) != l.Digest || len(blob) != l.Size {
		t.Fatalf("layer blob does not match its descriptor")
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(blob) >= len(layer) {
		t.Errorf("compressed layer (%d bytes) is not smaller than the tar (%d)", len(blob), len(layer))
	}
	var config struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(entries[blobPath(manifest.Config.Digest)], &config); err != nil {
		t.Fatal(err)
	}
	// The runtime checks the unpacked layer against the diff ID: the
	// uncompressed tar's digest.
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest(layer) {
		t.Errorf("diff_ids %v, want the uncompressed layer's %s", config.RootFS.DiffIDs, digest(layer))
	}
	if _, ok := readArchive(t, layer)["bin/tool"]; !ok {
		t.Error("layer lacks bin/tool")
	}
	var again bytes.Buffer
	if err := WriteArchive(&again, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("two gzipped archives of one image differ")
	}
}
