// Package ociregistry serves image archives over the OCI distribution API,
// read-only: a registry for machines without one, from the OCI image
// layout archives sqlkube's images are (node/images.WriteArchive, the
// conformance images). It answers GET and HEAD on /v2/,
// /v2/NAME/manifests/TAG-OR-DIGEST, /v2/NAME/blobs/DIGEST and
// /v2/NAME/tags/list, which is what containerd's resolver and fetcher use
// to pull; a node's containerd reaches it as a mirror (a hosts.toml,
// docs/node.md).
//
// An image is known by the name its archive gives it
// (io.containerd.image.name, else a full reference in
// org.opencontainers.image.ref.name): registry.k8s.io/pause:3.10 is the
// repository pause of the registry host registry.k8s.io. A mirror's
// request says which host it is for (containerd's ns query parameter);
// without one, NAME may begin with the host
// (/v2/registry.k8s.io/pause/...), or be the path alone when only one
// host has it.
//
// Blobs are served in place from the archives, which stay open: nothing
// is unpacked. Open reads the tar headers, index.json and the manifests
// (checking their digests and every blob's size); layer digests are
// checked by the client, as a pull always does.
package ociregistry

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sort"
	"strings"
)

// Media types of the manifests and indexes this registry walks.
const (
	mediaTypeOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
)

func isIndex(mt string) bool    { return mt == mediaTypeOCIIndex || mt == mediaTypeDockerList }
func isManifest(mt string) bool { return mt == mediaTypeOCIManifest || mt == mediaTypeDockerManifest }

// descriptor is the part of an OCI content descriptor this registry reads.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

// document is the part of an index or a manifest this registry reads.
type document struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"`
	Config    *descriptor  `json:"config"`
	Layers    []descriptor `json:"layers"`
}

// manifest is a manifest or an index, held in memory.
type manifest struct {
	mediaType string
	data      []byte
}

// repository is what the registry serves under one name: its tags, and
// the manifests and blobs they reach.
type repository struct {
	host, path string
	tags       map[string]string // tag → manifest digest
	manifests  map[string]manifest
	blobs      map[string]blob
}

// Registry serves the images of a set of archives. It is an http.Handler;
// Close closes the archives.
type Registry struct {
	archives []*archive
	repos    map[string]*repository // HOST/PATH → repository
}

// ErrNoImage is returned by Open for an archive whose index names no
// image: nothing it holds could be pulled by name.
var ErrNoImage = errors.New("ociregistry: the archive's index.json names no image")

// Open opens the archives (OCI image layouts in tar files) and returns a
// Registry that serves their images. Two archives may hold the same
// image, but not the same name for different images.
func Open(paths ...string) (*Registry, error) {
	r := &Registry{repos: map[string]*repository{}}
	for _, p := range paths {
		a, err := openArchive(p)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.archives = append(r.archives, a)
		if err := r.add(a); err != nil {
			r.Close()
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return r, nil
}

// Close closes the archives; the Registry serves nothing afterwards.
func (r *Registry) Close() error {
	var errs []error
	for _, a := range r.archives {
		errs = append(errs, a.file.Close())
	}
	r.archives = nil
	return errors.Join(errs...)
}

// Images lists the images served, HOST/PATH:TAG (or @DIGEST when an image
// has no tag), sorted.
func (r *Registry) Images() []string {
	var out []string
	for key, repo := range r.repos {
		for tag := range repo.tags {
			out = append(out, key+":"+tag)
		}
		if len(repo.tags) == 0 {
			for d := range repo.manifests {
				out = append(out, key+"@"+d)
			}
		}
	}
	sort.Strings(out)
	return out
}

// add adds the images a's index.json names.
func (r *Registry) add(a *archive) error {
	var index document
	if err := json.Unmarshal(a.index, &index); err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	named := 0
	for _, d := range index.Manifests {
		ref := d.Annotations["io.containerd.image.name"]
		if ref == "" {
			// A tag alone names nothing here: the repository is unknown.
			if rn := d.Annotations["org.opencontainers.image.ref.name"]; strings.Contains(rn, "/") {
				ref = rn
			}
		}
		if ref == "" {
			continue
		}
		name, err := parseImageName(ref)
		if err != nil {
			return err
		}
		if name.digest != "" && name.digest != d.Digest {
			return fmt.Errorf("image %s is named with another digest than its manifest's, %s", ref, d.Digest)
		}
		repo := r.repos[name.repository()]
		if repo == nil {
			repo = &repository{host: name.host, path: name.path, tags: map[string]string{}, manifests: map[string]manifest{}, blobs: map[string]blob{}}
			r.repos[name.repository()] = repo
		}
		if name.tag != "" {
			if old, ok := repo.tags[name.tag]; ok && old != d.Digest {
				return fmt.Errorf("image %s is %s here and %s in an archive before", ref, d.Digest, old)
			}
			repo.tags[name.tag] = d.Digest
		}
		if err := addManifest(repo, a, d, false, 0); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		named++
	}
	if named == 0 {
		return ErrNoImage
	}
	return nil
}

// maxDepth bounds indexes of indexes.
const maxDepth = 4

// addManifest adds the manifest or index d of a to repo, with what it
// reaches. An index's manifests may be missing from the archive (an
// archive of one platform of a multi-platform image): they are left out
// (optional); a manifest's config and layers must be there.
func addManifest(repo *repository, a *archive, d descriptor, optional bool, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("indexes nested deeper than %d", maxDepth)
	}
	b, ok := a.blobs[d.Digest]
	if !ok {
		if optional {
			return nil
		}
		return fmt.Errorf("manifest %s is not in the archive", d.Digest)
	}
	if b.size != d.Size {
		return fmt.Errorf("manifest %s: %d bytes, its descriptor says %d", d.Digest, b.size, d.Size)
	}
	data, err := b.read(maxDocument)
	if err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	if err := checkDigest(d.Digest, data); err != nil {
		return err
	}
	var doc document
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	mt := d.MediaType
	if mt == "" {
		mt = doc.MediaType
	}
	if mt == "" && doc.Manifests != nil {
		mt = mediaTypeOCIIndex
	} else if mt == "" {
		mt = mediaTypeOCIManifest
	}
	repo.manifests[d.Digest] = manifest{mediaType: mt, data: data}
	switch {
	case isIndex(mt):
		for _, m := range doc.Manifests {
			if err := addManifest(repo, a, m, true, depth+1); err != nil {
				return err
			}
		}
	case isManifest(mt):
		if doc.Config == nil {
			return fmt.Errorf("manifest %s has no config", d.Digest)
		}
		for _, l := range append([]descriptor{*doc.Config}, doc.Layers...) {
			lb, ok := a.blobs[l.Digest]
			if !ok {
				return fmt.Errorf("blob %s of manifest %s is not in the archive", l.Digest, d.Digest)
			}
			if lb.size != l.Size {
				return fmt.Errorf("blob %s: %d bytes, manifest %s says %d", l.Digest, lb.size, d.Digest, l.Size)
			}
			repo.blobs[l.Digest] = lb
		}
	default:
		return fmt.Errorf("manifest %s has media type %q, neither an image manifest nor an index", d.Digest, mt)
	}
	return nil
}

// checkDigest checks that data has digest d.
func checkDigest(d string, data []byte) error {
	alg, enc, _ := strings.Cut(d, ":")
	var h hash.Hash
	switch alg {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return fmt.Errorf("digest %q: unknown algorithm", d)
	}
	h.Write(data)
	if got := hex.EncodeToString(h.Sum(nil)); got != enc {
		return fmt.Errorf("manifest %s: its bytes have digest %s:%s", d, alg, got)
	}
	return nil
}

// lookup finds the repository a request names: name under host ns when
// the request gives one (a mirror's request); else name as HOST/PATH,
// else the one repository whose path is name.
func (r *Registry) lookup(name, ns string) *repository {
	if ns != "" {
		return r.repos[canonicalHost(ns)+"/"+name]
	}
	if repo := r.repos[name]; repo != nil {
		return repo
	}
	var found *repository
	for _, repo := range r.repos {
		if repo.path == name {
			if found != nil {
				return nil // ambiguous: the request must say which host
			}
			found = repo
		}
	}
	return found
}

// sortedTags is repo's tags in order.
func (repo *repository) sortedTags() []string {
	tags := make([]string, 0, len(repo.tags))
	for t := range repo.tags {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	return tags
}

// manifestFor is the manifest ref names in repo: a tag or a digest.
func (repo *repository) manifestFor(ref string) (string, manifest, bool) {
	d := ref
	if !strings.Contains(ref, ":") {
		if d = repo.tags[ref]; d == "" {
			return "", manifest{}, false
		}
	}
	m, ok := repo.manifests[d]
	return d, m, ok
}

// blob returns the blob d of repo: a layer, a config, or a manifest.
func (repo *repository) blob(d string) (io.ReadSeeker, bool) {
	if b, ok := repo.blobs[d]; ok {
		return b.reader(), true
	}
	if m, ok := repo.manifests[d]; ok {
		return bytes.NewReader(m.data), true
	}
	return nil, false
}
