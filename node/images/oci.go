// Package images makes small container images without a registry: the
// sandbox (pause) image sqlkube's nodes need, and images tests build from
// files on the host. An image is written as an OCI image layout archive
// (a tar), which containerd imports.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// File is one entry of an image's only layer.
type File struct {
	// Path inside the image, absolute ("/bin/sh").
	Path string
	// Data is a regular file's content.
	Data []byte
	// Mode of a regular file (0o755 for programs; 0o644 when zero).
	Mode int64
	// Link, when set, makes the entry a symbolic link to it.
	Link string
	// Dir makes the entry an (empty) directory.
	Dir bool
	// HardLink, when set, makes the entry a hard link to the regular file
	// at that path, which must be an earlier entry of the same image (in
	// the layer's order: see layerTar).
	HardLink string
	// Uid and Gid own the entry (root when zero).
	Uid, Gid int
}

// Image describes a single-layer linux/amd64 image.
type Image struct {
	// Name is the full reference the runtime knows it by
	// ("sqlkube.local/pause:1").
	Name       string
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// User runs the image's processes ("1234", "1234:1234" or a name
	// from the image's /etc/passwd) unless a pod says otherwise; root
	// when empty.
	User string
	// StopSignal is the signal that stops the image's process
	// ("SIGQUIT"); the runtime's default (SIGTERM) when empty.
	StopSignal string
	// Gzip stores the layer gzip-compressed (smaller archives and
	// content stores; the runtime decompresses it once, to unpack).
	Gzip bool
}

// epoch stamps every entry, so the same image always has the same digest.
var epoch = time.Unix(0, 0).UTC()

// WriteArchive writes img as an OCI image layout archive to w.
func WriteArchive(w io.Writer, img Image) error {
	if img.Name == "" {
		return fmt.Errorf("images: an image needs a name")
	}
	layer, err := layerTar(img.Files)
	if err != nil {
		return err
	}
	diffID := digest(layer)
	layerType := "application/vnd.oci.image.layer.v1.tar"
	if img.Gzip {
		if layer, err = gzipped(layer); err != nil {
			return err
		}
		layerType += "+gzip"
	}
	layerDigest := digest(layer)
	type platformConfig struct {
		User       string   `json:"User,omitempty"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		Env        []string `json:"Env,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
		StopSignal string   `json:"StopSignal,omitempty"`
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       platformConfig{img.User, img.Entrypoint, img.Cmd, img.Env, img.WorkingDir, img.StopSignal},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return err
	}
	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: len(config)},
		"layers":        []descriptor{{MediaType: layerType, Digest: layerDigest, Size: len(layer)}},
	})
	if err != nil {
		return err
	}
	tag := img.Name
	if i := strings.LastIndex(img.Name, ":"); i > strings.LastIndex(img.Name, "/") {
		tag = img.Name[i+1:]
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: len(manifest),
			// containerd names the imported image after the first;
			// other tools read the second.
			Annotations: map[string]string{"io.containerd.image.name": img.Name, "org.opencontainers.image.ref.name": tag},
		}},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(digest(manifest)), manifest},
		{blobPath(digest(config)), config},
		{blobPath(layerDigest), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layerTar is the layer: the files, with their parent directories, in
// path order compared one component at a time (so a directory precedes
// everything in it, and "a/b" precedes "a-b").
func layerTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	regular := map[string]bool{}
	sorted := append([]File(nil), files...)
	for i := range sorted {
		sorted[i].Path = path.Clean("/" + sorted[i].Path)
	}
	sort.SliceStable(sorted, func(i, j int) bool { return pathLess(sorted[i].Path, sorted[j].Path) })
	for _, f := range sorted {
		p := strings.TrimPrefix(f.Path, "/")
		if p == "" {
			return nil, fmt.Errorf("images: file without a path")
		}
		var parents []string
		for d := path.Dir(p); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: p, ModTime: epoch, Uid: f.Uid, Gid: f.Gid}
		switch {
		case f.Dir:
			if dirs[p] {
				continue
			}
			dirs[p] = true
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, p+"/", 0o755
			if f.Mode != 0 {
				h.Mode = f.Mode
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		case f.HardLink != "":
			target := strings.TrimPrefix(path.Clean("/"+f.HardLink), "/")
			if !regular[target] {
				return nil, fmt.Errorf("images: %s is a hard link to %s, which is no earlier regular file", f.Path, f.HardLink)
			}
			h.Typeflag, h.Linkname, h.Mode = tar.TypeLink, target, f.Mode
		default:
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, int64(len(f.Data)), f.Mode
			if h.Mode == 0 {
				h.Mode = 0o644
			}
			regular[p] = true
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pathLess orders clean absolute paths one component at a time.
func pathLess(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] != bs[i] {
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}

// gzipped compresses b with a header that names no file and no time, so
// the same layer always compresses to the same bytes.
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

// PauseImageName is the default sandbox image, made by PauseImage.
const PauseImageName = "sqlkube.local/pause:1"

// PauseImage is the sandbox image: PauseProgram as /pause.
func PauseImage(name string) Image {
	return Image{
		Name:       name,
		Files:      []File{{Path: "/pause", Data: PauseProgram(), Mode: 0o755}},
		Entrypoint: []string{"/pause"},
	}
}
