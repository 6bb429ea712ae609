// Package testbin builds the sqlkube binary for the end-to-end test
// packages (apiserver/e2e, etcdshim/e2e) once per package, the way the
// Makefile builds it: with the Kubernetes version stamped into the
// embedded components.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot is the directory of go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the sqlkube module")
	}
	return filepath.Dir(mod), nil
}

// KubernetesVersion is the version of k8s.io/kubernetes in go.mod
// ("v1.37.2"), which the binary Build makes reports.
func KubernetesVersion(root string) (string, error) {
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m k8s.io/kubernetes: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// LDFlags are the linker flags the Makefile uses: the version of
// k8s.io/kubernetes in go.mod as the components' version.
func LDFlags(root string) (string, error) {
	v, err := KubernetesVersion(root)
	if err != nil {
		return "", err
	}
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return "", fmt.Errorf("k8s.io/kubernetes version %q", v)
	}
	const pkg = "k8s.io/component-base/version."
	return fmt.Sprintf("-X %sgitVersion=%s -X %sgitMajor=%s -X %sgitMinor=%s", pkg, v, pkg, parts[0], pkg, parts[1]), nil
}

// Build builds ./cmd/sqlkube into dir and returns the binary's path.
func Build(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	ldflags, err := LDFlags(root)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sqlkube")
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/sqlkube")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sqlkube: %v\n%s", err, out)
	}
	return bin, nil
}
