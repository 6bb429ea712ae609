package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestServer_AllowPrivileged: a server admits a pod with a privileged
// container by default (as kubeadm and k3s run kube-apiserver), and
// refuses it with kube-apiserver's message under --allow-privileged=false.
// Privilege is process-wide state in Kubernetes' validation, which the
// kubelet used to set as a side effect while it ran in the server's
// process.
func TestServer_AllowPrivileged(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	writeFile(t, manifest, `apiVersion: v1
kind: Pod
metadata: {name: priv, namespace: default}
spec:
  containers:
  - name: c
    image: busybox
    securityContext: {privileged: true}
`)
	for _, tc := range []struct {
		name  string
		args  []string
		admit bool
	}{
		{"default", nil, true},
		{"allow-privileged=false", []string{"--allow-privileged=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startCommand(t, t.TempDir(), append([]string{"server"}, tc.args...)...)
			s.waitKubectl(t, bin, "serviceaccount/default", "get", "serviceaccount", "default", "-o", "name")
			out, err := s.kubectl(t, bin, "create", "--dry-run=server", "-f", manifest, "-o", "name")
			switch {
			case tc.admit && err != nil:
				t.Fatalf("a privileged pod was refused: %v\n%s", err, out)
			case !tc.admit && (err == nil || !strings.Contains(err.Error(), "privileged: Forbidden: disallowed by cluster policy")):
				t.Fatalf("a privileged pod under --allow-privileged=false: %v\n%s", err, out)
			}
		})
	}
}
