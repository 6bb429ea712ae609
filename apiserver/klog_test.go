package apiserver_test

import (
	"flag"

	"k8s.io/klog/v2"
)

// The Kubernetes libraries' info logs (informers, admission plugins) would
// interleave with test and benchmark output; errors still show.
func init() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("stderrthreshold", "ERROR")
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
}
