package ociregistry

import (
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// The grammar of the OCI distribution specification: a repository name is
// path components of lowercase letters and digits joined by separators; a
// tag is at most 128 characters.
var (
	nameRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagRE  = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
)

// digestHexLen is the length of the encoded part of the digests this
// registry knows: the algorithms of the OCI image specification.
var digestHexLen = map[string]int{"sha256": 64, "sha512": 128}

// validDigest reports whether d is ALGORITHM:HEX with an algorithm of
// digestHexLen and lowercase hexadecimal of its length.
func validDigest(d string) bool {
	alg, enc, ok := strings.Cut(d, ":")
	if !ok || len(enc) != digestHexLen[alg] || strings.ToLower(enc) != enc {
		return false
	}
	_, err := hex.DecodeString(enc)
	return err == nil
}

// dockerHub is the registry host of names without one (busybox:1 is
// docker.io/library/busybox:1), as containerd and Docker read them.
const dockerHub = "docker.io"

// canonicalHost is the name a registry host is known by: Docker Hub's
// other names are docker.io, as containerd's ns parameter says it.
func canonicalHost(host string) string {
	switch host {
	case "index.docker.io", "registry-1.docker.io":
		return dockerHub
	}
	return host
}

// imageName is an image's reference split: registry host, repository
// path in it, and a tag or a digest or both.
type imageName struct {
	host, path, tag, digest string
}

// repository is the name repositories are keyed by: HOST/PATH.
func (n imageName) repository() string { return n.host + "/" + n.path }

// parseImageName splits a full reference as containerd names an imported
// image (registry.k8s.io/pause:3.10, busybox:1.36, example.test:5000/a/b@sha256:…).
// Without a host the name is Docker Hub's (with library/ for a single
// component); without a tag or a digest the tag is latest.
func parseImageName(ref string) (imageName, error) {
	var n imageName
	rest, dgst, hasDigest := strings.Cut(ref, "@")
	if hasDigest {
		if !validDigest(dgst) {
			return n, fmt.Errorf("image name %q: invalid digest", ref)
		}
		n.digest = dgst
	}
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		rest, n.tag = rest[:i], rest[i+1:]
		if !tagRE.MatchString(n.tag) {
			return n, fmt.Errorf("image name %q: invalid tag", ref)
		}
	}
	first, path, hasSlash := strings.Cut(rest, "/")
	if hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost") {
		n.host, n.path = canonicalHost(first), path
	} else {
		n.host, n.path = dockerHub, rest
	}
	if n.host == dockerHub && !strings.Contains(n.path, "/") {
		n.path = "library/" + n.path
	}
	if !nameRE.MatchString(n.path) {
		return n, fmt.Errorf("image name %q: invalid repository name %q", ref, n.path)
	}
	if n.tag == "" && n.digest == "" {
		n.tag = "latest"
	}
	return n, nil
}
