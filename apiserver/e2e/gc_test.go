package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestKubectl_GarbageCollection: Kubernetes' garbage collector and
// namespace controller in `sqlkube server --fake-nodes 1`: a Deployment
// deleted in the background, in the foreground and orphaning its
// ReplicaSets; a ConfigMap owned by a custom resource; a namespace full of
// workloads deleted to the last object.
func TestKubectl_GarbageCollection(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	s := startCommand(t, t.TempDir(), "server", "--fake-nodes", "1")
	newNamespace := func(t *testing.T, ns string) {
		t.Helper()
		s.mustKubectl(t, bin, "create", "namespace", ns)
		s.waitKubectl(t, bin, "serviceaccount/default", "-n", ns, "get", "serviceaccount", "default", "-o", "name")
	}

	t.Run("Deployment", func(t *testing.T) {
		t.Parallel()
		ns := "gc"
		newNamespace(t, ns)
		k := func(args ...string) string { return s.mustKubectl(t, bin, append([]string{"-n", ns}, args...)...) }
		for _, d := range []string{"bg", "fg", "orphan"} {
			k("create", "deployment", d, "--image=nginx", "--replicas=2")
		}
		for _, d := range []string{"bg", "fg", "orphan"} {
			k("rollout", "status", "deployment/"+d, "--timeout=60s")
			s.waitKubectl(t, bin, "Running Running", "-n", ns, "get", "pods", "-l", "app="+d, "-o", "jsonpath={.items[*].status.phase}")
		}

		// Background (kubectl's default): the Deployment goes at once,
		// its ReplicaSet and pods after it.
		k("delete", "deployment", "bg")
		s.waitKubectl(t, bin, "", "-n", ns, "get", "replicasets,pods", "-l", "app=bg", "-o", "name")

		// Foreground: the Deployment and its ReplicaSet stay, with the
		// foregroundDeletion finalizer, until their dependents are gone;
		// a finalizer of ours on one pod holds the chain.
		held := strings.Fields(k("get", "pods", "-l", "app=fg", "-o", "jsonpath={.items[*].metadata.name}"))[0]
		k("patch", "pod", held, "--type=merge", "-p", `{"metadata":{"finalizers":["e2e.sqlkube.io/hold"]}}`)
		k("delete", "deployment", "fg", "--cascade=foreground", "--wait=false")
		deleting := `jsonpath={range .items[*]}{.kind} {.metadata.finalizers[*]} {.metadata.deletionTimestamp}{"\n"}{end}`
		until(t, commandTimeout, "the Deployment, its ReplicaSet and the held pod being deleted, the other pod gone", func() (bool, error) {
			out, err := s.kubectl(t, bin, "-n", ns, "get", "deployments,replicasets,pods", "-l", "app=fg", "-o", deleting)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			return len(lines) == 3 && strings.HasPrefix(lines[0], "Deployment foregroundDeletion 20") &&
				strings.HasPrefix(lines[1], "ReplicaSet foregroundDeletion 20") &&
				strings.HasPrefix(lines[2], "Pod e2e.sqlkube.io/hold 20"), err
		})
		k("patch", "pod", held, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		s.waitKubectl(t, bin, "", "-n", ns, "get", "deployments,replicasets,pods", "-l", "app=fg", "-o", "name")

		// Orphan: the ReplicaSet and its pods stay, no longer owned.
		rs := k("get", "replicasets", "-l", "app=orphan", "-o", "jsonpath={.items[*].metadata.name}")
		pods := k("get", "pods", "-l", "app=orphan", "-o", "jsonpath={.items[*].metadata.uid}")
		k("delete", "deployment", "orphan", "--cascade=orphan")
		if _, err := s.kubectl(t, bin, "-n", ns, "get", "deployment", "orphan"); err == nil || !strings.Contains(err.Error(), "NotFound") {
			t.Fatalf("deployment after delete --cascade=orphan: %v", err)
		}
		if out := k("get", "replicasets", "-l", "app=orphan", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences} {.spec.replicas}{end}`); out != rs+"  2" {
			t.Fatalf("orphaned ReplicaSet %s: got %q, want it without ownerReferences and 2 replicas", rs, out)
		}
		if out := k("get", "pods", "-l", "app=orphan", "-o", "jsonpath={.items[*].metadata.uid}"); out != pods {
			t.Fatalf("pods of the orphaned ReplicaSet: %q, want %q", out, pods)
		}
	})

	t.Run("CustomResourceOwner", func(t *testing.T) {
		t.Parallel()
		ns := "gc-cr"
		newNamespace(t, ns)
		s.apply(t, bin, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: owners.gc.e2e.example.com}
spec:
  group: gc.e2e.example.com
  scope: Namespaced
  names: {plural: owners, singular: owner, kind: Owner}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`)
		s.mustKubectl(t, bin, "wait", "--for=condition=established", "crd/owners.gc.e2e.example.com", "--timeout=60s")
		s.apply(t, bin, "apiVersion: gc.e2e.example.com/v1\nkind: Owner\nmetadata: {name: o, namespace: gc-cr}\n")
		uid := s.mustKubectl(t, bin, "-n", ns, "get", "owner", "o", "-o", "jsonpath={.metadata.uid}")
		s.apply(t, bin, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: owned
  namespace: gc-cr
  ownerReferences: [{apiVersion: gc.e2e.example.com/v1, kind: Owner, name: o, uid: %s}]
data: {a: b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unowned, namespace: gc-cr}
`, uid))
		s.mustKubectl(t, bin, "-n", ns, "delete", "owner", "o")
		s.waitKubectl(t, bin, "configmap/unowned", "-n", ns, "get", "configmap", "owned", "unowned", "-o", "name", "--ignore-not-found")
	})

	t.Run("Namespace", func(t *testing.T) {
		t.Parallel()
		ns := "doomed"
		newNamespace(t, ns)
		k := func(args ...string) string { return s.mustKubectl(t, bin, append([]string{"-n", ns}, args...)...) }
		k("create", "deployment", "web", "--image=nginx", "--replicas=2")
		k("expose", "deployment", "web", "--port=80")
		s.apply(t, bin, `apiVersion: batch/v1
kind: Job
metadata: {name: long, namespace: doomed}
spec:
  template:
    metadata: {annotations: {fake.sqlkube.io/succeed-after: 1h}}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
`)
		k("run", "bare", "--image=nginx")
		k("create", "configmap", "cm", "--from-literal=a=b")
		s.waitKubectl(t, bin, "Running Running Running Running", "-n", ns, "get", "pods", "-o", "jsonpath={.items[*].status.phase}")

		s.mustKubectl(t, bin, "delete", "namespace", ns, "--timeout=90s")
		if _, err := s.kubectl(t, bin, "get", "namespace", ns); err == nil || !strings.Contains(err.Error(), "NotFound") {
			t.Fatalf("namespace after delete: %v", err)
		}
		// Nothing of any namespaced kind is left in it.
		kinds := strings.Fields(s.mustKubectl(t, bin, "api-resources", "--namespaced=true", "--verbs=list", "-o", "name"))
		if len(kinds) < 20 {
			t.Fatalf("api-resources: %v", kinds)
		}
		if out := s.mustKubectl(t, bin, "get", strings.Join(kinds, ","), "-n", ns, "-o", "name"); out != "" {
			t.Fatalf("left in deleted namespace %s:\n%s", ns, out)
		}
		if out := s.mustKubectl(t, bin, "get", "pods", "-A", "--field-selector=metadata.namespace="+ns, "-o", "name"); out != "" {
			t.Fatalf("pods of deleted namespace %s:\n%s", ns, out)
		}
	})
}
