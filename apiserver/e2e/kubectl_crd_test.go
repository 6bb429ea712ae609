package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectl_CRD: with each kubectl, apply a CRD, wait for it to be
// established, apply custom resources (validated by the schema, shown
// with the printer columns and by short name), explain the kind, scale
// one, then delete the CRD and see its custom resources go with it. Each
// kubectl uses a group of its own.
func TestKubectl_CRD(t *testing.T) {
	bins := kubectls(t)
	s := startServer(t, t.TempDir())
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			group := "e2e-" + strings.ReplaceAll(name, ".", "-") + ".example.com"
			crdName := "gizmos." + group
			dir := t.TempDir()
			crd := filepath.Join(dir, "crd.yaml")
			writeFile(t, crd, fmt.Sprintf(gizmoCRD, crdName, group))
			if out := s.mustKubectl(t, bin, "apply", "-f", crd); !strings.Contains(out, "created") {
				t.Fatalf("apply CRD:\n%s", out)
			}
			s.mustKubectl(t, bin, "wait", "--for", "condition=established", "crd/"+crdName, "--timeout=60s")

			cr := filepath.Join(dir, "cr.yaml")
			writeFile(t, cr, fmt.Sprintf(gizmo, group, "g1", "red", 2))
			if out := s.mustKubectl(t, bin, "apply", "-f", cr); !strings.Contains(out, "created") {
				t.Fatalf("apply CR:\n%s", out)
			}
			writeFile(t, cr, fmt.Sprintf(gizmo, group, "g1", "green", 3))
			if out := s.mustKubectl(t, bin, "apply", "-f", cr); !strings.Contains(out, "configured") {
				t.Fatalf("apply CR (update):\n%s", out)
			}
			out := s.mustKubectl(t, bin, "get", "gizmos."+group)
			if !strings.Contains(out, "COLOR") || !strings.Contains(out, "REPLICAS") || !strings.Contains(out, "green") {
				t.Fatalf("get with printer columns:\n%s", out)
			}
			if out := s.mustKubectl(t, bin, "get", "gz", "g1", "-o", "jsonpath={.spec.size} {.metadata.generation}"); out != "small 2" {
				t.Fatalf("get by short name (defaulted size, generation): %q", out)
			}
			writeFile(t, cr, fmt.Sprintf(gizmo, group, "g2", "blue", -1))
			if _, err := s.kubectl(t, bin, "apply", "-f", cr); err == nil || !strings.Contains(err.Error(), "spec.replicas") {
				t.Fatalf("apply of an invalid CR: got %v", err)
			}
			if out := s.mustKubectl(t, bin, "explain", "gizmos."+group+".spec"); !strings.Contains(out, "color") {
				t.Fatalf("explain:\n%s", out)
			}
			s.mustKubectl(t, bin, "scale", "gizmos."+group, "g1", "--replicas=5")
			if out := s.mustKubectl(t, bin, "get", "gz", "g1", "-o", "jsonpath={.spec.replicas}"); out != "5" {
				t.Fatalf("after scale: %q", out)
			}
			if out := s.mustKubectl(t, bin, "api-resources", "--api-group="+group); !strings.Contains(out, "gizmos") || !strings.Contains(out, "gz") {
				t.Fatalf("api-resources:\n%s", out)
			}

			s.mustKubectl(t, bin, "delete", "-f", crd, "--timeout=60s")
			if _, err := s.kubectl(t, bin, "get", "crd", crdName); err == nil || !strings.Contains(err.Error(), "NotFound") {
				t.Fatalf("get CRD after delete: %v", err)
			}
			s.mustKubectl(t, bin, "apply", "-f", crd)
			s.mustKubectl(t, bin, "wait", "--for", "condition=established", "crd/"+crdName, "--timeout=60s")
			if out := s.mustKubectl(t, bin, "get", "gizmos."+group, "-o", "name"); out != "" {
				t.Fatalf("custom resources survived their CRD: %q", out)
			}
			s.mustKubectl(t, bin, "delete", "crd", crdName)
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// gizmoCRD is a cluster-scoped CRD (name, group) with a schema, a
// default, scale and status subresources and printer columns.
const gizmoCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %s
spec:
  group: %s
  scope: Cluster
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, shortNames: [gz]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the gizmo should be.
            properties:
              color: {type: string, description: The gizmo's color.}
              size: {type: string, default: small}
              replicas: {type: integer, minimum: 0}
          status:
            type: object
            properties:
              replicas: {type: integer}
`

// gizmo is a Gizmo (group, name, color, replicas).
const gizmo = `apiVersion: %s/v1
kind: Gizmo
metadata:
  name: %s
spec:
  color: %s
  replicas: %d
`
