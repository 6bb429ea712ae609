package apiserver_test

import (
	"net/http"
	"strings"
	"testing"
)

// getPath GETs path with the Accept header (getDiscovery), returning the
// status code and body.
func getPath(t *testing.T, host, path, accept string) (int, string) {
	t.Helper()
	resp, body := getDiscovery(t, host+path, accept, "")
	return resp.StatusCode, string(body)
}

// kube-apiserver serves every discovery document with a trailing slash
// too (the conformance suite reads /apis/, kubectl proxy /api/): /api/,
// /api/v1/, /apis/GROUP/ and /apis/GROUP/VERSION/ as without it, /apis/
// the APIGroupList whatever the Accept header (its aggregator serves
// aggregated discovery at /apis only).
func TestDiscovery_TrailingSlash(t *testing.T) {
	host := newServer(t).Host
	for _, tc := range []struct{ path, kind string }{
		{"/api", `"kind":"APIVersions"`},
		{"/apis", `"kind":"APIGroupList"`},
		{"/api/v1", `"kind":"APIResourceList"`},
		{"/apis/apps", `"kind":"APIGroup"`},
		{"/apis/apps/v1", `"kind":"APIResourceList"`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, want := getPath(t, host, tc.path, "application/json")
			if code != http.StatusOK || !strings.Contains(want, tc.kind) {
				t.Fatalf("GET %s: %d %s", tc.path, code, want)
			}
			code, got := getPath(t, host, tc.path+"/", "application/json")
			if code != http.StatusOK || got != want {
				t.Errorf("GET %s/: %d %s, want 200 %s", tc.path, code, got, want)
			}
		})
	}
	t.Run("aggregated", func(t *testing.T) {
		const accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
		if code, body := getPath(t, host, "/api/", accept); code != http.StatusOK || !strings.Contains(body, `"kind":"APIGroupDiscoveryList"`) {
			t.Errorf("GET /api/ for aggregated discovery: %d %.200s, want the APIGroupDiscoveryList", code, body)
		}
		if code, body := getPath(t, host, "/apis/", accept); code != http.StatusOK || !strings.Contains(body, `"kind":"APIGroupList"`) {
			t.Errorf("GET /apis/ for aggregated discovery: %d %.200s, want the APIGroupList", code, body)
		}
	})
	for _, path := range []string{"/apis/nosuch.example.com/", "/apis/apps/v9/", "/api/v9/"} {
		if code, body := getPath(t, host, path, "application/json"); code != http.StatusNotFound {
			t.Errorf("GET %s: %d %s, want 404", path, code, body)
		}
	}
}
