// Command etcdbenchmark is etcd's own load generator,
// go.etcd.io/etcd/v3/tools/benchmark, built as a dependency of this tiny
// module: `go install` refuses that package for the replace directives in
// its own go.mod, which a dependency's go.mod does not carry.
//
//	cd bench/etcdbenchmark && go build -o /tmp/etcdbenchmark .
//	/tmp/etcdbenchmark --endpoints 127.0.0.1:2379 --clients 50 --conns 10 put --total 5000 --val-size 256 --sequential-keys
//
// bench/compare.sh builds and runs it; it is its own module so that the
// main module does not depend on etcd's server code.
package main

import (
	"fmt"
	"os"

	"go.etcd.io/etcd/v3/tools/benchmark/cmd"
)

func main() {
	if err := cmd.RootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
