package apiserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

func getDiscovery(t *testing.T, url, accept, ifNoneMatch string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept", accept)
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", ifNoneMatch)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestDiscovery_Aggregated: /api and /apis answer aggregated discovery
// (v2 and v2beta1) when asked, with an ETag, and the legacy documents
// otherwise.
func TestDiscovery_Aggregated(t *testing.T) {
	cfg := newServer(t)
	const kubectlAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"

	resp, body := getDiscovery(t, cfg.Host+"/apis", kubectlAccept, "")
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList" {
		t.Fatalf("GET /apis: %d %q", resp.StatusCode, ct)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "APIGroupDiscoveryList" || list.APIVersion != "apidiscovery.k8s.io/v2" {
		t.Fatalf("type: %+v", list.TypeMeta)
	}
	var deployments *apidiscoveryv2.APIResourceDiscovery
	for _, g := range list.Items {
		if g.Name == "" || len(g.Versions) == 0 {
			t.Fatalf("group %+v", g)
		}
		if g.Name == "apps" {
			for i, r := range g.Versions[0].Resources {
				if r.Resource == "deployments" {
					deployments = &g.Versions[0].Resources[i]
				}
			}
		}
	}
	if deployments == nil {
		t.Fatalf("no apps/v1 deployments in %s", body)
	}
	var subs []string
	for _, s := range deployments.Subresources {
		subs = append(subs, fmt.Sprintf("%s:%s/%s", s.Subresource, s.ResponseKind.Group, s.ResponseKind.Kind))
	}
	sort.Strings(subs)
	if deployments.Scope != apidiscoveryv2.ScopeNamespace || deployments.ResponseKind.Kind != "Deployment" || deployments.SingularResource != "deployment" ||
		fmt.Sprint(subs) != "[scale:autoscaling/Scale status:/Deployment]" || !strings.Contains(strings.Join(deployments.ShortNames, ","), "deploy") {
		t.Fatalf("deployments: %+v, subresources %v", deployments, subs)
	}

	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	if resp, _ := getDiscovery(t, cfg.Host+"/apis", kubectlAccept, etag); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match with the ETag: got %d, want 304", resp.StatusCode)
	}

	// kubectl 1.27 asks for v2beta1 only.
	resp, body = getDiscovery(t, cfg.Host+"/api", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", "")
	if ct := resp.Header.Get("Content-Type"); ct != "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList" {
		t.Fatalf("v2beta1 content type %q", ct)
	}
	var core apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &core); err != nil || core.APIVersion != "apidiscovery.k8s.io/v2beta1" || len(core.Items) != 1 || core.Items[0].Name != "" ||
		len(core.Items[0].Versions) != 1 || core.Items[0].Versions[0].Version != "v1" {
		t.Fatalf("core group: %v %s", err, body)
	}

	// A plain Accept gets the legacy documents.
	resp, body = getDiscovery(t, cfg.Host+"/apis", "application/json", "")
	var legacy metav1.APIGroupList
	if err := json.Unmarshal(body, &legacy); err != nil || resp.Header.Get("Content-Type") != "application/json" || legacy.Kind != "APIGroupList" || len(legacy.Groups) != len(list.Items) {
		t.Fatalf("legacy /apis: %v %q %s", err, resp.Header.Get("Content-Type"), body)
	}
}

// TestDiscovery_ClientGo: client-go's discovery client gets aggregated
// discovery and finds the same groups and resources as with the legacy
// documents.
func TestDiscovery_ClientGo(t *testing.T) {
	cfg := rest.CopyConfig(newServer(t))
	var (
		mu    sync.Mutex
		types []string
	)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && (req.URL.Path == "/api" || req.URL.Path == "/apis") {
				mu.Lock()
				types = append(types, resp.Header.Get("Content-Type"))
				mu.Unlock()
			}
			return resp, err
		})
	})
	resources := func(legacy bool) []string {
		dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
		dc.UseLegacyDiscovery = legacy
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range lists {
			for _, r := range l.APIResources {
				out = append(out, fmt.Sprintf("%s %s %s %v %v", l.GroupVersion, r.Name, r.Kind, r.Namespaced, r.Verbs))
			}
		}
		sort.Strings(out)
		return out
	}
	aggregated := resources(false)
	if len(types) != 2 || !strings.Contains(types[0], "as=APIGroupDiscoveryList") || !strings.Contains(types[1], "as=APIGroupDiscoveryList") {
		t.Fatalf("client-go got %q, want aggregated discovery", types)
	}
	legacy := resources(true)
	if strings.Join(aggregated, "\n") != strings.Join(legacy, "\n") {
		t.Fatalf("aggregated and legacy discovery differ:\n%s\n---\n%s", strings.Join(aggregated, "\n"), strings.Join(legacy, "\n"))
	}
	if len(aggregated) < 30 {
		t.Fatalf("only %d resources", len(aggregated))
	}
}
