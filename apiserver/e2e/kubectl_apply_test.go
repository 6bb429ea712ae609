package e2e

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// applyServices are one Service of each kind kubectl users apply; NAME is
// replaced per way of creating.
const applyServices = `apiVersion: v1
kind: Service
metadata: {name: NAME-clusterip}
spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: NAME-nodeport}
spec: {type: NodePort, selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: NAME-headless}
spec: {clusterIP: None, selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: NAME-dual}
spec: {ipFamilyPolicy: PreferDualStack, selector: {app: web}, ports: [{port: 80}]}
`

// TestKubectl_ServerSideApplyServices: `kubectl apply --server-side`
// stores the same Services as `kubectl create` (each with its addresses,
// in range), the server lives on (the endpoints controller reads them),
// `--dry-run=server` keeps nothing, and a RequireDualStack Service is
// refused on this single-stack cluster.
func TestKubectl_ServerSideApplyServices(t *testing.T) {
	s := startServer(t, t.TempDir())
	dir := t.TempDir()
	manifest := func(name string) string {
		p := filepath.Join(dir, name+".yaml")
		writeFile(t, p, strings.ReplaceAll(applyServices, "NAME", name))
		return p
	}
	for bin, path := range kubectls(t) {
		t.Run(bin, func(t *testing.T) {
			applied, created := "a"+strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl"), ".", ""), "c"+strings.ReplaceAll(strings.TrimPrefix(bin, "kubectl"), ".", "")
			s.mustKubectl(t, path, "apply", "--server-side", "-f", manifest(applied))
			s.mustKubectl(t, path, "create", "-f", manifest(created))
			// A dry run of another set leaves nothing behind.
			dry := "d" + strings.TrimPrefix(applied, "a")
			s.mustKubectl(t, path, "apply", "--server-side", "--dry-run=server", "-f", manifest(dry))
			for _, kind := range []string{"clusterip", "nodeport", "headless", "dual"} {
				a, c := getService(t, s, path, applied+"-"+kind), getService(t, s, path, created+"-"+kind)
				checkServiceAddresses(t, a)
				checkServiceAddresses(t, c)
				if ga, gc := serviceShape(t, a), serviceShape(t, c); ga != gc {
					t.Fatalf("%s: applied and created services differ:\n applied %s\n created %s", kind, ga, gc)
				}
				if _, err := s.kubectl(t, path, "get", "service", dry+"-"+kind); err == nil || !strings.Contains(err.Error(), "NotFound") {
					t.Fatalf("a --dry-run=server apply stored %s-%s (%v)", dry, kind, err)
				}
			}
		})
	}
	requireDual := filepath.Join(dir, "require.yaml")
	writeFile(t, requireDual, `apiVersion: v1
kind: Service
metadata: {name: require}
spec: {ipFamilyPolicy: RequireDualStack, selector: {app: web}, ports: [{port: 80}]}
`)
	out, err := s.kubectl(t, "kubectl", "apply", "--server-side", "-f", requireDual)
	if err == nil || !strings.Contains(err.Error(), "this cluster is not configured for dual-stack services") {
		t.Fatalf("RequireDualStack: %v %s, want refused (not configured for dual-stack)", err, out)
	}
	// The endpoints controller reconciled them and the server is up.
	s.waitKubectl(t, "kubectl", "endpoints/a-clusterip", "get", "endpoints", "a-clusterip", "-o", "name")
	if strings.Contains(s.stderr.String(), "panic") {
		t.Fatalf("the server's log has a panic:\n%s", s.stderr)
	}
}

type svcJSON struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec map[string]any `json:"spec"`
}

func getService(t *testing.T, s *server, kubectl, name string) svcJSON {
	t.Helper()
	var svc svcJSON
	if err := json.Unmarshal([]byte(s.mustKubectl(t, kubectl, "get", "service", name, "-o", "json")), &svc); err != nil {
		t.Fatal(err)
	}
	return svc
}

// checkServiceAddresses: a cluster IP in the service range (or None),
// IP families, and node ports in range where the type needs them.
func checkServiceAddresses(t *testing.T, svc svcJSON) {
	t.Helper()
	_, serviceNet, _ := net.ParseCIDR("10.96.0.0/12")
	ip, _ := svc.Spec["clusterIP"].(string)
	if ip != "None" && (net.ParseIP(ip) == nil || !serviceNet.Contains(net.ParseIP(ip))) {
		t.Fatalf("%s: clusterIP %q", svc.Metadata.Name, ip)
	}
	if fam, _ := svc.Spec["ipFamilies"].([]any); len(fam) == 0 || svc.Spec["ipFamilyPolicy"] == nil {
		t.Fatalf("%s: ipFamilies %v, policy %v", svc.Metadata.Name, svc.Spec["ipFamilies"], svc.Spec["ipFamilyPolicy"])
	}
	if svc.Spec["type"] == "NodePort" {
		for _, p := range svc.Spec["ports"].([]any) {
			if np, _ := p.(map[string]any)["nodePort"].(float64); np < 30000 || np > 32767 {
				t.Fatalf("%s: node port %v", svc.Metadata.Name, np)
			}
		}
	}
}

// serviceShape is a service's spec without its allocated values.
func serviceShape(t *testing.T, svc svcJSON) string {
	t.Helper()
	spec := map[string]any{}
	for k, v := range svc.Spec {
		spec[k] = v
	}
	if spec["clusterIP"] != "None" {
		delete(spec, "clusterIP")
		delete(spec, "clusterIPs")
	}
	if ports, ok := spec["ports"].([]any); ok {
		for _, p := range ports {
			delete(p.(map[string]any), "nodePort")
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
