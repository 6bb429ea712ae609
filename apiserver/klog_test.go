package apiserver_test

import (
	"flag"
	"io"

	"k8s.io/klog/v2"
)

// The Kubernetes libraries' info logs (informers, admission plugins) would
// interleave with test and benchmark output; errors still show. With
// logtostderr off klog would write its log files into the temporary
// directory, one set per test binary run: the output it would have written
// there is discarded instead.
func init() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("stderrthreshold", "ERROR")
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	klog.SetOutput(io.Discard)
}
