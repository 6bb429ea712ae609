// Package kubeproxy runs Kubernetes' own kube-proxy
// (k8s.io/kubernetes/cmd/kube-proxy/app) inside a sqlkube node agent:
// Services' cluster IPs, node ports, session affinity and traffic
// policies, for the node's network namespace: in nftables mode where
// kube-proxy's nftables mode runs (the nft command, Linux 5.13 or later),
// in iptables mode otherwise (--proxy-mode chooses).
//
// It runs as the node (the node's own credential; sqlkube binds the
// system:node-proxier role to the group system:nodes), detects local
// traffic by the node's pod CIDR (so it needs no cluster CIDR), serves
// its health check (:10256) and metrics (127.0.0.1:10249) as kube-proxy
// does, and leaves the host's conntrack table size alone. One kube-proxy
// per network namespace: two would rewrite each other's rules.
//
// It runs in a child process (Run), not in the node agent's: kube-proxy
// ends its process with os.Exit when the node's pod CIDR or (since 1.37)
// its addresses change, or its Node is deleted (its node manager),
// counting on a supervisor to start it again with the new values. Run is
// that supervisor, and the node agent (which may be `sqlkube server`, the
// whole control plane) never ends with it. Those exits are expected: the
// child logs why at info level (Notices), and so does Run its restart.
package kubeproxy

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/kubernetes/cmd/kube-proxy/app"

	"github.com/sqlkube/sqlkube/internal/childproc"
)

// Notices are the messages kube-proxy's node manager
// (k8s.io/kubernetes/pkg/proxy/node.go) logs, as klog info lines, just
// before it ends its process to be started again: the node's pod CIDRs
// or addresses changed, or its Node was deleted.
var Notices = []string{"PodCIDRs changed for the node", "NodeIPs changed for the node", "Node is being deleted"}

// Options configure the embedded kube-proxy.
type Options struct {
	// Kubeconfig is the node's credential.
	Kubeconfig string
	// NodeName is the Node it proxies for (it waits for its pod CIDR).
	NodeName string
	// NodeIP is the node's primary address.
	NodeIP string
	// Mode is kube-proxy's --proxy-mode (default: DefaultMode()).
	Mode string
	// ExtraArgs are kube-proxy flags, applied last (--kube-proxy-arg).
	ExtraArgs []string
	// Command is how Run starts kube-proxy: a program and its first
	// arguments, to which Run appends Args. The program must pass those
	// to RunInProcess (sqlkube's hidden `kube-proxy` command does) and
	// write its logs as JSON lines (zerolog's) to standard error, the
	// klog lines whose message is one of Notices at info level.
	Command []string
	// Log gets the child's log lines (and what else it writes).
	Log zerolog.Logger
}

// Args are the kube-proxy flags Options stand for, before ExtraArgs.
func (o Options) Args() []string {
	mode := o.Mode
	if mode == "" {
		mode = DefaultMode()
	}
	args := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--hostname-override=" + o.NodeName,
		"--proxy-mode=" + mode,
		"--detect-local-mode=NodeCIDR",
		// The host's conntrack table is the host's to size (and it cannot
		// be changed from a network namespace other than the host's).
		"--conntrack-max-per-core=0",
	}
	if o.NodeIP != "" {
		args = append(args, "--bind-address="+o.NodeIP)
	}
	return append(args, o.ExtraArgs...)
}

// DefaultMode is nftables where kube-proxy's nftables mode runs (the nft
// command, Linux 5.13 or later, as kube-proxy requires), iptables
// otherwise.
func DefaultMode() string {
	if _, err := exec.LookPath("nft"); err != nil {
		return "iptables"
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil || !kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 13) {
		return "iptables"
	}
	return "nftables"
}

// kernelAtLeast reports whether a kernel release ("6.1.0-18-amd64") is
// major.minor or later.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	digits := parts[1]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i] // "13rc1"
	}
	min, err2 := strconv.Atoi(digits)
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || maj == major && min >= minor
}

// options parses Args into kube-proxy's options and checks them.
func options(o Options) (*app.Options, error) {
	if o.Kubeconfig == "" || o.NodeName == "" {
		return nil, fmt.Errorf("kube-proxy: Kubeconfig and NodeName are required")
	}
	return parse(o.Args())
}

// parse parses kube-proxy's flags into its options and checks them.
func parse(args []string) (*app.Options, error) {
	ko := app.NewOptions()
	fs := pflag.NewFlagSet("kube-proxy", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	ko.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("--kube-proxy-arg: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("--kube-proxy-arg: unexpected argument %q", fs.Arg(0))
	}
	if err := ko.Complete(fs); err != nil {
		return nil, fmt.Errorf("kube-proxy: %w", err)
	}
	if err := ko.Validate(); err != nil {
		return nil, fmt.Errorf("kube-proxy: %w", err)
	}
	return ko, nil
}

// Check parses and validates o as Run would, without running anything.
func Check(o Options) error {
	_, err := options(o)
	return err
}

// Run runs kube-proxy in a child process (o.Command) until ctx ends, and
// starts it again whenever it exits (a minute apart at most); its logs go
// to o.Log. It returns an error only when o is invalid. When ctx ends the
// child gets SIGTERM, and it gets SIGTERM too if this process dies first.
// kube-proxy's rules stay after it, so Services keep working while it
// restarts.
func Run(ctx context.Context, o Options) error {
	if _, err := options(o); err != nil {
		return err
	}
	if len(o.Command) == 0 {
		return fmt.Errorf("kube-proxy: no Command to run it with")
	}
	childproc.Supervise(ctx, childproc.Options{Name: "kube-proxy", Argv: append(slices.Clip(o.Command), o.Args()...), Log: o.Log, Notices: Notices})
	return nil
}

// RunInProcess runs kube-proxy with its flags args in this process until
// ctx ends or it fails. kube-proxy is not built to stop inside a process
// that goes on (its informers live until the process exits), and it may
// end the process itself: this is for the child process Run starts.
func RunInProcess(ctx context.Context, args []string) error {
	ko, err := parse(args)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ko.Run(ctx) }()
	select {
	case err := <-done:
		return fmt.Errorf("kube-proxy: %w", err)
	case <-ctx.Done():
		return nil
	}
}
