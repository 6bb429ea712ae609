package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// referenceDir holds what kube-apiserver v1.37.2 serves with default flags
// (see testdata/README.md for how it was captured).
const referenceDir = "testdata/kube-apiserver-v1.37.2"

// deliberateExtras are resources sqlkube serves that kube-apiserver
// v1.37.2 does not by default, and why.
var deliberateExtras = map[string]string{
	"authentication.k8s.io/v1beta1 selfsubjectreviews": "kubectl 1.27's `auth whoami` asks for v1beta1 (v1 is preferred, so `kubectl api-resources` is unchanged)",
}

// subresourcesNotServed are kube-apiserver's subresources sqlkube does not
// serve, and why: none.
var subresourcesNotServed = map[string]string{}

// subresourceRows indexes the subresources of aggregated discovery by
// "GROUP/VERSION RESOURCE/SUBRESOURCE": their verbs and response kinds.
func subresourceRows(lists ...*apidiscoveryv2.APIGroupDiscoveryList) map[string]string {
	out := map[string]string{}
	for _, list := range lists {
		for _, g := range list.Items {
			for _, v := range g.Versions {
				gv := strings.TrimPrefix(g.Name+"/"+v.Version, "/")
				for _, r := range v.Resources {
					for _, sub := range r.Subresources {
						kind := ""
						if sub.ResponseKind != nil {
							kind = sub.ResponseKind.Group + "/" + sub.ResponseKind.Version + "/" + sub.ResponseKind.Kind
						}
						out[gv+" "+r.Resource+"/"+sub.Subresource] = fmt.Sprintf("verbs=[%s] kind=%s", sortedJoin(sub.Verbs), kind)
					}
				}
			}
		}
	}
	return out
}

// discoveryRow is what `kubectl api-resources -o wide` shows of a
// resource, from aggregated discovery.
type discoveryRow struct {
	ShortNames, Verbs, Categories string
	Kind                          string
	Namespaced                    bool
}

func (r discoveryRow) String() string {
	return fmt.Sprintf("shortNames=[%s] kind=%s namespaced=%v verbs=[%s] categories=[%s]", r.ShortNames, r.Kind, r.Namespaced, r.Verbs, r.Categories)
}

func sortedJoin(s []string) string {
	s = slices.Clone(s)
	slices.Sort(s)
	return strings.Join(s, ",")
}

// discoveryRows indexes the top-level resources of aggregated discovery
// documents by "GROUP/VERSION RESOURCE"; preferred lists the same keys of
// each group's preferred (first) version only, as kubectl api-resources
// shows them.
func discoveryRows(lists ...*apidiscoveryv2.APIGroupDiscoveryList) (all, preferred map[string]discoveryRow) {
	all, preferred = map[string]discoveryRow{}, map[string]discoveryRow{}
	for _, list := range lists {
		for _, g := range list.Items {
			for i, v := range g.Versions {
				gv := v.Version
				if g.Name != "" {
					gv = g.Name + "/" + v.Version
				}
				for _, r := range v.Resources {
					row := discoveryRow{
						ShortNames: sortedJoin(r.ShortNames), Verbs: sortedJoin(r.Verbs), Categories: sortedJoin(r.Categories),
						Namespaced: r.Scope == apidiscoveryv2.ScopeNamespace,
					}
					if r.ResponseKind != nil {
						row.Kind = r.ResponseKind.Kind
					}
					key := gv + " " + r.Resource
					all[key] = row
					if i == 0 {
						preferred[key] = row
					}
				}
			}
		}
	}
	return all, preferred
}

func readReference(t *testing.T, name string) *apidiscoveryv2.APIGroupDiscoveryList {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(referenceDir, name))
	if err != nil {
		t.Fatal(err)
	}
	list := &apidiscoveryv2.APIGroupDiscoveryList{}
	if err := json.Unmarshal(body, list); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return list
}

func fetchDiscovery(t *testing.T, cfg *rest.Config, path string) *apidiscoveryv2.APIGroupDiscoveryList {
	t.Helper()
	body, err := kubernetes.NewForConfigOrDie(cfg).Discovery().RESTClient().Get().AbsPath(path).
		SetHeader("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	list := &apidiscoveryv2.APIGroupDiscoveryList{}
	if err := json.Unmarshal(body, list); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return list
}

// parseAPIResources reads `kubectl api-resources -o wide` output into
// rows by "APIVERSION NAME" (columns cut where the header puts them, as
// SHORTNAMES and CATEGORIES may be empty).
func parseAPIResources(t *testing.T, text string) map[string]discoveryRow {
	t.Helper()
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	header := lines[0]
	cols := []string{"NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND", "VERBS", "CATEGORIES"}
	starts := make([]int, len(cols))
	for i, c := range cols {
		if starts[i] = strings.Index(header, c); starts[i] < 0 {
			t.Fatalf("api-resources header %q lacks %s", header, c)
		}
	}
	rows := map[string]discoveryRow{}
	for _, line := range lines[1:] {
		cell := func(i int) string {
			end := len(line)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(line))
			}
			if starts[i] >= len(line) {
				return ""
			}
			return strings.TrimSpace(line[starts[i]:end])
		}
		split := func(s string) string {
			if s == "" {
				return ""
			}
			return sortedJoin(strings.Split(s, ","))
		}
		rows[cell(2)+" "+cell(0)] = discoveryRow{
			ShortNames: split(cell(1)), Namespaced: cell(3) == "true", Kind: cell(4), Verbs: split(cell(5)), Categories: split(cell(6)),
		}
	}
	return rows
}

// compareRows lists what differs between got (named gotName) and want
// (kube-apiserver's), skipping the keys in extras.
func compareRows(gotName string, got, want map[string]discoveryRow, extras map[string]string) []string {
	var diffs []string
	for key, w := range want {
		g, ok := got[key]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing  %s: %s", key, w))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("differs  %s:\n    %-15s %s\n    kube-apiserver: %s", key, gotName+":", g, w))
		}
	}
	for key, g := range got {
		if _, ok := want[key]; !ok && extras[key] == "" {
			diffs = append(diffs, fmt.Sprintf("extra    %s: %s", key, g))
		}
	}
	slices.Sort(diffs)
	return diffs
}

// TestDiscovery_MatchesKubeAPIServer: sqlkube's discovery lists the same
// resources as kube-apiserver v1.37.2 with default flags: for each group's
// preferred version what `kubectl api-resources -o wide` prints (name,
// short names, group/version, namespaced, kind, verbs, categories), and
// the same fields for every served group-version (autoscaling/v1, say).
func TestDiscovery_MatchesKubeAPIServer(t *testing.T) {
	cfg := newServer(t)
	core, groups := fetchDiscovery(t, cfg, "/api"), fetchDiscovery(t, cfg, "/apis")
	all, preferred := discoveryRows(core, groups)
	text, err := os.ReadFile(filepath.Join(referenceDir, "api-resources-wide.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if diffs := compareRows("sqlkube", preferred, parseAPIResources(t, string(text)), deliberateExtras); len(diffs) > 0 {
		t.Errorf("kubectl api-resources -o wide differs from kube-apiserver v1.37.2's (%d):\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	refAll, refPreferred := discoveryRows(readReference(t, "discovery-api.json"), readReference(t, "discovery-apis.json"))
	if diffs := compareRows("its discovery", refPreferred, parseAPIResources(t, string(text)), nil); len(diffs) > 0 {
		t.Fatalf("the reference's discovery and api-resources disagree:\n%s", strings.Join(diffs, "\n"))
	}
	if diffs := compareRows("sqlkube", all, refAll, deliberateExtras); len(diffs) > 0 {
		t.Errorf("discovery of every group-version differs from kube-apiserver v1.37.2's (%d):\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	// Subresources too, but for those not served yet (listed).
	got, want := subresourceRows(core, groups), subresourceRows(readReference(t, "discovery-api.json"), readReference(t, "discovery-apis.json"))
	var diffs []string
	for key, w := range want {
		if g := got[key]; g != w && (g != "" || subresourcesNotServed[key] == "") {
			diffs = append(diffs, fmt.Sprintf("%s: sqlkube %q, kube-apiserver %q", key, g, w))
		}
		if got[key] != "" && subresourcesNotServed[key] != "" {
			diffs = append(diffs, key+" is served now: take it off subresourcesNotServed")
		}
	}
	for key, g := range got {
		if _, ok := want[key]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: sqlkube %q, not served by kube-apiserver", key, g))
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		t.Errorf("subresources differ from kube-apiserver v1.37.2's (%d):\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
}
