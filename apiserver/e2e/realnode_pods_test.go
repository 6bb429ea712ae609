package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// podManifest writes a manifest into a temporary file for kubectl apply.
func podManifest(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.yaml")
	writeFile(t, p, strings.ReplaceAll(yaml, "IMAGE", testImage))
	return p
}

// waitFor polls cond every 200 ms for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRealNode_PodFeatures: what the kubelet brings, through sqlkube's
// API: probes, volumes, resource limits, in-place resize.
func TestRealNode_PodFeatures(t *testing.T) {
	requireNodeHost(t)
	// Pods sync every 3 s, so updated configMaps and secrets reach their
	// volumes quickly.
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), "e2e-features", "--kubelet-arg=--sync-frequency=3s")
	k := kubectlPath(t)
	get := func(args ...string) string {
		return strings.TrimSpace(s.mustKubectl(t, k, append([]string{"get"}, args...)...))
	}

	t.Run("probes", func(t *testing.T) {
		s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  containers:
  - name: c
    image: IMAGE
    command: [sh, -c, "touch /tmp/healthy; sleep 2; rm /tmp/healthy; sleep 3600"]
    livenessProbe: {exec: {command: [cat, /tmp/healthy]}, periodSeconds: 1, failureThreshold: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: ready, labels: {app: ready}}
spec:
  containers:
  - name: c
    image: IMAGE
    command: [sleep, "3600"]
    readinessProbe: {exec: {command: [cat, /tmp/ready]}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: ready}
spec:
  selector: {app: ready}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: startup}
spec:
  containers:
  - name: c
    image: IMAGE
    command: [sleep, "3600"]
    startupProbe: {exec: {command: [cat, /tmp/started]}, periodSeconds: 1, failureThreshold: 120}
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
    livenessProbe: {exec: {command: ["false"]}, periodSeconds: 1, failureThreshold: 1}
`))
		// The liveness probe restarts the container once /tmp/healthy is gone.
		waitFor(t, 60*time.Second, "a liveness restart", func() bool {
			n := get("pod", "live", "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
			return n != "" && n != "0"
		})
		// Readiness gates the Service's endpoints.
		waitFor(t, 60*time.Second, "pod ready running", func() bool {
			return get("pod", "ready", "-o", "jsonpath={.status.containerStatuses[0].started}") == "true"
		})
		if r := get("pod", "ready", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); r != "False" {
			t.Fatalf("pod ready is Ready=%s before its probe passes", r)
		}
		if ips := get("endpoints", "ready", "-o", "jsonpath={.subsets[*].addresses[*].ip}"); ips != "" {
			t.Fatalf("the service lists %q before the pod is ready", ips)
		}
		s.mustKubectl(t, k, "exec", "ready", "--", "touch", "/tmp/ready")
		podIP := get("pod", "ready", "-o", "jsonpath={.status.podIP}")
		waitFor(t, 60*time.Second, "the ready pod in the service's endpoints", func() bool {
			return get("endpoints", "ready", "-o", "jsonpath={.subsets[*].addresses[*].ip}") == podIP
		})
		// The startup probe holds readiness (and the failing liveness
		// probe) back until it passes.
		waitFor(t, 60*time.Second, "pod startup running", func() bool {
			return get("pod", "startup", "-o", "jsonpath={.status.containerStatuses[0].state.running.startedAt}") != ""
		})
		time.Sleep(3 * time.Second) // three probe periods: nothing may change meanwhile
		if got := get("pod", "startup", "-o", "jsonpath={.status.containerStatuses[0].ready} {.status.containerStatuses[0].restartCount}"); got != "false 0" {
			t.Fatalf("before its startup probe passes the pod is ready/restarts %q, want \"false 0\"", got)
		}
		s.mustKubectl(t, k, "exec", "startup", "--", "touch", "/tmp/started")
		waitFor(t, 60*time.Second, "a liveness restart after startup", func() bool {
			n := get("pod", "startup", "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
			return n != "" && n != "0"
		})
	})

	t.Run("volumes", func(t *testing.T) {
		host := t.TempDir()
		writeFile(t, filepath.Join(host, "on-host.txt"), "from the host\n")
		pvDir := t.TempDir()
		s.mustKubectl(t, k, "create", "configmap", "cfg", "--from-literal=key=one")
		s.mustKubectl(t, k, "create", "secret", "generic", "sec", "--from-literal=pw=alpha")
		s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-e2e}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  hostPath: {path: `+pvDir+`}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: claim}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: vol, labels: {tier: e2e}}
spec:
  containers:
  - name: c
    image: IMAGE
    command: [sh, -c, "echo shared > /scratch/f; echo persisted > /data/written.txt; sleep 3600"]
    resources: {requests: {cpu: 150m}}
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: cfg, mountPath: /cfg}
    - {name: sec, mountPath: /sec}
    - {name: info, mountPath: /info}
    - {name: host, mountPath: /host}
    - {name: data, mountPath: /data}
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: cfg, configMap: {name: cfg}}
  - {name: sec, secret: {secretName: sec}}
  - name: info
    downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}, {path: labels, fieldRef: {fieldPath: metadata.labels}}]}
  - {name: host, hostPath: {path: `+host+`}}
  - {name: data, persistentVolumeClaim: {claimName: claim}}
`))
		s.mustKubectl(t, k, "wait", "--for=condition=Ready", "pod/vol", "--timeout=90s")
		cat := func(path string) string {
			return strings.TrimSpace(s.mustKubectl(t, k, "exec", "vol", "--", "cat", path))
		}
		for path, want := range map[string]string{
			"/scratch/f": "shared", "/cfg/key": "one", "/sec/pw": "alpha", "/info/name": "vol",
			"/info/labels": `tier="e2e"`, "/host/on-host.txt": "from the host",
		} {
			if got := cat(path); got != want {
				t.Errorf("%s = %q, want %q", path, got, want)
			}
		}
		if get("pvc", "claim", "-o", "jsonpath={.status.phase}") != "Bound" {
			t.Errorf("the claim is not Bound")
		}
		waitFor(t, 30*time.Second, "the claim's volume written on the host", func() bool {
			b, _ := os.ReadFile(filepath.Join(pvDir, "written.txt"))
			return string(b) == "persisted\n"
		})
		// configMap and secret volumes follow their objects.
		s.mustKubectl(t, k, "patch", "configmap", "cfg", "-p", `{"data":{"key":"two"}}`)
		s.mustKubectl(t, k, "patch", "secret", "sec", "-p", `{"stringData":{"pw":"beta"}}`)
		waitFor(t, 90*time.Second, "updated configMap and secret volumes", func() bool {
			return cat("/cfg/key") == "two" && cat("/sec/pw") == "beta"
		})
		// The projected service-account token is accepted by the API server.
		token := cat("/var/run/secrets/kubernetes.io/serviceaccount/token")
		if who := s.mustKubectlWith(t, s.asToken(t, token), k, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); who != "system:serviceaccount:default:default" {
			t.Errorf("the pod's token authenticates as %q", who)
		}
	})

	t.Run("static pod", func(t *testing.T) {
		// A manifest in DATA_DIR/node/pod-manifests runs without the API,
		// and shows there as a mirror pod named after the node.
		dir := filepath.Join(s.dataDir, "node", "pod-manifests")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		manifest := filepath.Join(dir, "static.yaml")
		writeFile(t, manifest, strings.ReplaceAll(`apiVersion: v1
kind: Pod
metadata: {name: static, namespace: default}
spec:
  containers:
  - name: c
    image: IMAGE
    command: [sh, -c, "echo static pod up; sleep 3600"]
`, "IMAGE", testImage))
		mirror := "static-e2e-features"
		waitFor(t, 90*time.Second, "mirror pod "+mirror+" Running", func() bool {
			out, _ := s.kubectl(t, k, "get", "pod", mirror, "-o", "jsonpath={.status.phase}")
			return out == "Running"
		})
		if got := get("pod", mirror, "-o", `jsonpath={.metadata.annotations.kubernetes\.io/config\.mirror}/{.metadata.ownerReferences[0].kind}`); !strings.HasSuffix(got, "/Node") || len(got) < len("x/Node") {
			t.Errorf("mirror pod: config.mirror annotation/owner kind = %q, want a hash and Node", got)
		}
		waitFor(t, 30*time.Second, "the static pod's log", func() bool {
			out, _ := s.kubectl(t, k, "logs", mirror)
			return strings.Contains(out, "static pod up")
		})
		// Removing the manifest stops the pod and removes its mirror.
		if err := os.Remove(manifest); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, "mirror pod "+mirror+" gone", func() bool {
			_, err := s.kubectl(t, k, "get", "pod", mirror)
			return err != nil && strings.Contains(err.Error(), "NotFound")
		})
	})

	t.Run("limits", func(t *testing.T) {
		s.mustKubectl(t, k, "apply", "-f", podManifest(t, `
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: IMAGE
    command: [sh, -c, "x=$(head -c 200000000 /dev/zero | tr '\\000' a); sleep 3600"]
    resources: {limits: {memory: 32Mi}}
`))
		waitFor(t, 90*time.Second, "the memory hog OOMKilled", func() bool {
			return get("pod", "hog", "-o", "jsonpath={.status.containerStatuses[0].state.terminated.reason}") == "OOMKilled"
		})
		// The running pod vol requests 150m of cpu.
		if d := s.mustKubectl(t, k, "describe", "node", "e2e-features"); !strings.Contains(d, "150m") {
			t.Errorf("describe node does not show pod vol's cpu request:\n%s", d)
		}
	})

	t.Run("resize", func(t *testing.T) { testInPlaceResize(t, s) })
}
