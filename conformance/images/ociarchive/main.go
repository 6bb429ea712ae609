// Command ociarchive writes a host directory as a single-layer OCI image
// archive that containerd imports (node/images does the writing). It is
// conformance/images/build.sh's last step for every image.
//
//	ociarchive -name registry.k8s.io/e2e-test-images/agnhost:2.66.1 \
//	    -root DIR -entrypoint '["/agnhost"]' -cmd '["pause"]' -o agnhost.tar
//
// With -pause instead of -root, the image is sqlkube's own pause program
// at /pause.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sqlkube/sqlkube/node/images"
)

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		img             images.Image
		root, out       string
		entrypoint, cmd string
		env             stringList
		pause           bool
	)
	flag.StringVar(&img.Name, "name", "", "the image's full reference (registry/repository:tag)")
	flag.StringVar(&root, "root", "", "the directory that is the image's /")
	flag.BoolVar(&pause, "pause", false, "the image is sqlkube's pause program at /pause (instead of -root)")
	flag.StringVar(&entrypoint, "entrypoint", "", "the entrypoint, a JSON array")
	flag.StringVar(&cmd, "cmd", "", "the command, a JSON array")
	flag.Var(&env, "env", "an environment variable NAME=VALUE (repeatable)")
	flag.StringVar(&img.WorkingDir, "workdir", "", "the working directory")
	flag.StringVar(&img.User, "user", "", "the user the image runs as")
	flag.StringVar(&img.StopSignal, "stop-signal", "", "the signal that stops the image's process")
	flag.BoolVar(&img.Gzip, "gzip", false, "store the layer gzip-compressed")
	flag.StringVar(&out, "o", "", "the archive to write")
	flag.Parse()
	if err := run(img, root, out, entrypoint, cmd, env, pause); err != nil {
		fmt.Fprintln(os.Stderr, "ociarchive:", err)
		os.Exit(1)
	}
}

func run(img images.Image, root, out, entrypoint, cmd string, env []string, pause bool) error {
	if out == "" || (root == "") == !pause {
		return fmt.Errorf("need -o and one of -root or -pause")
	}
	for _, a := range []struct {
		flag, value string
		into        *[]string
	}{{"entrypoint", entrypoint, &img.Entrypoint}, {"cmd", cmd, &img.Cmd}} {
		if a.value == "" {
			continue
		}
		if err := json.Unmarshal([]byte(a.value), a.into); err != nil {
			return fmt.Errorf("-%s: %w", a.flag, err)
		}
	}
	img.Env = env
	if pause {
		p := images.PauseImage(img.Name)
		img.Files, img.Entrypoint = p.Files, p.Entrypoint
	} else {
		files, err := images.ReadTree(root)
		if err != nil {
			return err
		}
		img.Files = files
	}
	// Written beside the target and renamed, so an archive that exists is
	// whole.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".ociarchive-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := images.WriteArchive(tmp, img); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
