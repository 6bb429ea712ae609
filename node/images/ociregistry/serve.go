package ociregistry

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The error codes of the OCI distribution specification this registry
// answers with.
const (
	codeBlobUnknown     = "BLOB_UNKNOWN"
	codeDigestInvalid   = "DIGEST_INVALID"
	codeManifestUnknown = "MANIFEST_UNKNOWN"
	codeNameInvalid     = "NAME_INVALID"
	codeNameUnknown     = "NAME_UNKNOWN"
	codeUnsupported     = "UNSUPPORTED"
)

// ServeHTTP answers the distribution API's pull requests (GET and HEAD):
//
//	/v2/                                    200, {}
//	/v2/NAME/manifests/TAG or DIGEST        the manifest or index, with its media type and digest
//	/v2/NAME/blobs/DIGEST                   the blob (a config, a layer, a manifest); ranges too
//	/v2/NAME/tags/list[?n=N&last=TAG]       {"name": NAME, "tags": [...]}
//
// Anything else is a 4xx with the specification's JSON error body: 400
// for a malformed name or digest, 404 for what is not here, 405 for the
// methods that write.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, req, http.StatusMethodNotAllowed, codeUnsupported, "this registry is read-only: it serves GET and HEAD")
		return
	}
	rest, ok := strings.CutPrefix(req.URL.Path, "/v2/")
	if req.URL.Path == "/v2" || (ok && rest == "") {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "2")
		if req.Method == http.MethodGet {
			_, _ = w.Write([]byte("{}"))
		}
		return
	}
	parts := strings.Split(rest, "/")
	n := len(parts)
	if !ok || n < 3 {
		writeError(w, req, http.StatusNotFound, codeUnsupported, "not an endpoint of this registry")
		return
	}
	name, kind, ref := strings.Join(parts[:n-2], "/"), parts[n-2], parts[n-1]
	switch {
	case kind == "manifests", kind == "blobs", kind == "tags" && ref == "list":
	default:
		writeError(w, req, http.StatusNotFound, codeUnsupported, "not an endpoint of this registry")
		return
	}
	if !nameRE.MatchString(name) {
		writeError(w, req, http.StatusBadRequest, codeNameInvalid, "invalid repository name")
		return
	}
	query := req.URL.Query()
	repo := r.lookup(name, query.Get("ns"))
	if repo == nil {
		writeError(w, req, http.StatusNotFound, codeNameUnknown, "no repository "+name+nsSuffix(query.Get("ns")))
		return
	}
	switch kind {
	case "manifests":
		serveManifest(w, req, repo, ref)
	case "blobs":
		serveBlob(w, req, repo, ref)
	default:
		serveTags(w, req, repo, name, query)
	}
}

func nsSuffix(ns string) string {
	if ns == "" {
		return ""
	}
	return " for " + ns
}

func serveManifest(w http.ResponseWriter, req *http.Request, repo *repository, ref string) {
	if strings.Contains(ref, ":") {
		if !validDigest(ref) {
			writeError(w, req, http.StatusBadRequest, codeDigestInvalid, "invalid digest")
			return
		}
	} else if !tagRE.MatchString(ref) {
		writeError(w, req, http.StatusNotFound, codeManifestUnknown, "invalid tag")
		return
	}
	d, m, ok := repo.manifestFor(ref)
	if !ok {
		writeError(w, req, http.StatusNotFound, codeManifestUnknown, "no manifest "+ref)
		return
	}
	w.Header().Set("Content-Type", m.mediaType)
	w.Header().Set("Docker-Content-Digest", d)
	w.Header().Set("ETag", `"`+d+`"`)
	http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(m.data))
}

func serveBlob(w http.ResponseWriter, req *http.Request, repo *repository, d string) {
	if !validDigest(d) {
		writeError(w, req, http.StatusBadRequest, codeDigestInvalid, "invalid digest")
		return
	}
	content, ok := repo.blob(d)
	if !ok {
		writeError(w, req, http.StatusNotFound, codeBlobUnknown, "no blob "+d)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Docker-Content-Digest", d)
	w.Header().Set("ETag", `"`+d+`"`)
	http.ServeContent(w, req, "", time.Time{}, content)
}

// serveTags lists repo's tags in order: at most n of them (the query's n),
// after last (the query's last), with a Link to the next page when there
// are more.
func serveTags(w http.ResponseWriter, req *http.Request, repo *repository, name string, query url.Values) {
	tags := repo.sortedTags()
	if last := query.Get("last"); last != "" {
		i := 0
		for i < len(tags) && tags[i] <= last {
			i++
		}
		tags = tags[i:]
	}
	if s := query.Get("n"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, req, http.StatusBadRequest, codeUnsupported, "n must be a number of tags")
			return
		}
		if n < len(tags) {
			tags = tags[:n]
			if n > 0 {
				next := url.Values{"n": {s}, "last": {tags[n-1]}}
				if ns := query.Get("ns"); ns != "" {
					next.Set("ns", ns)
				}
				w.Header().Set("Link", `</v2/`+name+`/tags/list?`+next.Encode()+`>; rel="next"`)
			}
		}
	}
	body, _ := json.Marshal(struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}{name, tags})
	w.Header().Set("Content-Type", "application/json")
	http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(body))
}

// writeError answers with the specification's error body (none to HEAD).
func writeError(w http.ResponseWriter, req *http.Request, status int, code, message string) {
	type apiError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Errors []apiError `json:"errors"`
	}{[]apiError{{code, message}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if req.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
