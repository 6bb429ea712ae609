// Command sqlkube is a Kubernetes-compatible control plane whose state lives
// in SQL. This file and its siblings only parse flags and wire packages.
package main

import (
	"fmt"
	"os"
)

func main() {
	defaultGRPCLogs()
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sqlkube:", err)
		os.Exit(1)
	}
}
