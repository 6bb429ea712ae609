// Package testbin builds the sqlkube binary for the end-to-end test
// packages (apiserver/e2e, etcdshim/e2e) once per package, the way the
// Makefile builds it: with the Kubernetes version stamped into the
// embedded components, and the runc shim and runc of `make runtime`
// beside it.
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
func KubernetesVersion(root string) (string, error) { return moduleVersion(root, "k8s.io/kubernetes") }

// ContainerdModule is containerd's module, linked into sqlkube.
const ContainerdModule = "github.com/containerd/containerd/v2"

func moduleVersion(root, module string) (string, error) {
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module)
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RuntimeDir is where `make runtime` builds the runc shim and runc:
// $SQLKUBE_RUNTIME_DIR (make test sets it), else the module's bin/.
func RuntimeDir(root string) string {
	if d := os.Getenv("SQLKUBE_RUNTIME_DIR"); d != "" {
		return d
	}
	return filepath.Join(root, "bin")
}

// LDFlags are the linker flags the Makefile uses: the version of
// k8s.io/kubernetes in go.mod as the components' version, and that of
// containerd as the linked containerd's.
func LDFlags(root string) (string, error) {
	v, err := KubernetesVersion(root)
	if err != nil {
		return "", err
	}
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return "", fmt.Errorf("k8s.io/kubernetes version %q", v)
	}
	cv, err := moduleVersion(root, ContainerdModule)
	if err != nil {
		return "", err
	}
	const pkg = "k8s.io/component-base/version."
	return fmt.Sprintf("-X %sgitVersion=%s -X %sgitMajor=%s -X %sgitMinor=%s -X %s/version.Version=%s",
		pkg, v, pkg, parts[0], pkg, parts[1], ContainerdModule, strings.TrimPrefix(cv, "v")), nil
}

// Build builds ./cmd/sqlkube into dir and returns the binary's path.
func Build(dir string) (string, error) { return BuildTags(dir) }

// BuildTags is Build with build tags.
func BuildTags(dir string, tags ...string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	ldflags, err := LDFlags(root)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sqlkube")
	build := exec.Command("go", "build", "-tags", strings.Join(tags, ","), "-ldflags", ldflags, "-o", bin, "./cmd/sqlkube")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sqlkube: %v\n%s", err, out)
	}
	// A node finds the runc shim and runc beside sqlkube's executable:
	// make runtime's, linked there when it has built them (the real-node
	// tests skip, or fail under CI=true, without them).
	for _, name := range []string{"containerd-shim-runc-v2", "runc"} {
		src := filepath.Join(RuntimeDir(root), name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if err := os.Symlink(src, filepath.Join(dir, name)); err != nil {
			return "", err
		}
	}
	return bin, nil
}
