package apiserver_test

import (
	"bytes"
	"net/http"
	"testing"
)

// FuzzRequestBody posts arbitrary bodies, in each encoding, to create,
// update and patch endpoints: every answer must be a Status below 500
// (or a success), never a panic or a server fault. `go test` runs the seed
// corpus; `go test -fuzz FuzzRequestBody ./apiserver/` explores.
func FuzzRequestBody(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
		`{"metadata":{"name":"../x"}}`, `{"kind":"ConfigMap","apiVersion":"v2"}`, `[]`, `null`, `{`, "\x00\x01",
		"k8s\x00\x0a\x02v1", `apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}`, `[{"op":"remove","path":"/x"}]`,
		`{"metadata":{"labels":{"a b":"c"}}}`, `{"data":{"k":1}}`,
	} {
		for variant := range uint8(9) {
			f.Add([]byte(seed), variant)
		}
	}
	fuzzServer := newServer(f).Host
	f.Fuzz(func(t *testing.T, body []byte, variant uint8) {
		type req struct{ method, path, contentType string }
		reqs := []req{
			{"POST", "/api/v1/namespaces/default/configmaps", "application/json"},
			{"POST", "/api/v1/namespaces/default/pods", "application/yaml"},
			{"POST", "/api/v1/namespaces/default/configmaps", "application/vnd.kubernetes.protobuf"},
			{"PUT", "/api/v1/namespaces/default/configmaps/a", "application/json"},
			{"PATCH", "/api/v1/namespaces/default/configmaps/a", "application/merge-patch+json"},
			{"PATCH", "/api/v1/namespaces/default/configmaps/a", "application/json-patch+json"},
			{"PATCH", "/api/v1/namespaces/default/configmaps/a", "application/strategic-merge-patch+json"},
			{"PATCH", "/api/v1/namespaces/default/configmaps/a?fieldManager=f", "application/apply-patch+yaml"},
			{"DELETE", "/api/v1/namespaces/default/configmaps/a", "application/json"},
		}
		r := reqs[int(variant)%len(reqs)]
		hr, err := http.NewRequest(r.method, fuzzServer+r.path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", r.contentType)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s (%s) with %q: %d", r.method, r.path, r.contentType, body, resp.StatusCode)
		}
	})
}
