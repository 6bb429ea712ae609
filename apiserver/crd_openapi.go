package apiserver

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"sort"
	"sync"
	"sync/atomic"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// openAPIDocs is one version of the published OpenAPI documents: the
// built-in ones with the served CRDs' schemas and paths merged in (as
// kube-apiserver's CRD OpenAPI controllers do). It is rebuilt on the first
// request after a CRD is served, changed or removed.
type openAPIDocs struct {
	v2      []byte
	v3Index []byte
	v3      map[string]v3Body // CRD group-versions only; the rest from the builder
	// v2Proto is v2 in protobuf, made on first request.
	v2ProtoOnce sync.Once
	v2Proto     []byte
	v2ProtoErr  error
}

type v3Body struct{ body, hash string }

// crdOpenAPI holds the current openAPIDocs.
type crdOpenAPI struct {
	// changes counts CRD changes; the CRD controller adds to it while it
	// holds its own lock, so it takes no lock here (openAPIDocs holds mu,
	// then the controller's lock to read the CRDs served).
	changes atomic.Uint64
	// mu guards docs and docsAt; lock order: mu, then crdController.mu.
	mu     sync.Mutex
	docs   *openAPIDocs // nil: never built
	docsAt uint64       // changes when docs were built
}

// crdOpenAPIChanged drops the merged documents after a CRD change.
func (s *Server) crdOpenAPIChanged() { s.crdDocs.changes.Add(1) }

// openAPIDocs returns the current documents, building them if a CRD
// changed since they were built (a change while they are built makes the
// next call build them again).
func (s *Server) openAPIDocs() (*openAPIDocs, error) {
	s.crdDocs.mu.Lock()
	defer s.crdDocs.mu.Unlock()
	at := s.crdDocs.changes.Load()
	if s.crdDocs.docs != nil && s.crdDocs.docsAt == at {
		return s.crdDocs.docs, nil
	}
	docs, err := s.buildOpenAPIDocs(s.servedCRDs())
	if err != nil {
		return nil, err
	}
	s.crdDocs.docs, s.crdDocs.docsAt = docs, at
	return docs, nil
}

// servedCRDs are the CRDs served now, by name.
func (s *Server) servedCRDs() []*apiextensionsv1.CustomResourceDefinition {
	var out []*apiextensionsv1.CustomResourceDefinition
	if s.crds == nil {
		return nil
	}
	s.crds.mu.Lock()
	defer s.crds.mu.Unlock()
	for _, sc := range s.crds.served {
		if len(sc.resources) > 0 {
			out = append(out, sc.resources[0].Custom.CRD)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Server) buildOpenAPIDocs(crds []*apiextensionsv1.CustomResourceDefinition) (*openAPIDocs, error) {
	docs := &openAPIDocs{v2: s.openapi.V2JSON(), v3Index: s.openapi.V3Index(), v3: map[string]v3Body{}}
	if len(crds) == 0 {
		return docs, nil
	}
	var v2Specs []*spec.Swagger
	v3Specs := map[schema.GroupVersion][]*spec3.OpenAPI{}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			s2, err := builder.BuildOpenAPIV2(crd, v.Name, builder.Options{V2: true})
			if err != nil {
				return nil, fmt.Errorf("openapi v2 of %s %s: %w", crd.Name, v.Name, err)
			}
			v2Specs = append(v2Specs, s2)
			s3, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
			if err != nil {
				return nil, fmt.Errorf("openapi v3 of %s %s: %w", crd.Name, v.Name, err)
			}
			gv := schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name}
			v3Specs[gv] = append(v3Specs[gv], s3)
		}
	}
	static := &spec.Swagger{}
	if err := json.Unmarshal(s.openapi.V2JSON(), static); err != nil {
		return nil, err
	}
	merged, err := builder.MergeSpecs(static, v2Specs...)
	if err != nil {
		return nil, err
	}
	if docs.v2, err = json.Marshal(merged); err != nil {
		return nil, err
	}
	var index struct {
		Paths map[string]map[string]string `json:"paths"`
	}
	if err := json.Unmarshal(docs.v3Index, &index); err != nil {
		return nil, err
	}
	for gv, specs := range v3Specs {
		doc, err := builder.MergeSpecsV3(specs...)
		if err != nil {
			return nil, err
		}
		body, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		key := "apis/" + gv.Group + "/" + gv.Version
		hash := fmt.Sprintf("%X", sha512.Sum512(body))
		docs.v3[key] = v3Body{body: string(body), hash: hash}
		u := url.URL{Path: path.Join("/openapi/v3", key), RawQuery: url.Values{"hash": {hash}}.Encode()}
		index.Paths[key] = map[string]string{"serverRelativeURL": u.String()}
	}
	if docs.v3Index, err = json.Marshal(index); err != nil {
		return nil, err
	}
	return docs, nil
}

// v2ProtoBytes is the v2 document in protobuf.
func (d *openAPIDocs) v2ProtoBytes() ([]byte, error) {
	d.v2ProtoOnce.Do(func() {
		doc, err := openapi_v2.ParseDocument(d.v2)
		if err == nil {
			d.v2Proto, err = proto.Marshal(doc)
		}
		d.v2ProtoErr = err
	})
	return d.v2Proto, d.v2ProtoErr
}

// v3Doc is one group-version's document: a CRD group-version's, else the
// built-in one.
func (s *Server) v3Doc(docs *openAPIDocs, key string) ([]byte, string, bool) {
	if d, ok := docs.v3[key]; ok {
		return []byte(d.body), d.hash, true
	}
	return s.openapi.V3Doc(key)
}
