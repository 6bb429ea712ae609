// Package kubeproxy runs Kubernetes' own kube-proxy
// (k8s.io/kubernetes/cmd/kube-proxy/app) inside a sqlkube node agent:
// Services' cluster IPs, node ports, session affinity and traffic
// policies, as iptables rules by default (nftables with
// --proxy-mode=nftables), for the node's network namespace.
//
// It runs as the node (the node's own credential; sqlkube binds the
// system:node-proxier role to the group system:nodes), detects local
// traffic by the node's pod CIDR (so it needs no cluster CIDR), serves
// its health check (:10256) and metrics (127.0.0.1:10249) as kube-proxy
// does, and leaves the host's conntrack table size alone. One kube-proxy
// per network namespace: two would rewrite each other's rules.
package kubeproxy

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

// Options configure the embedded kube-proxy.
type Options struct {
	// Kubeconfig is the node's credential.
	Kubeconfig string
	// NodeName is the Node it proxies for (it waits for its pod CIDR).
	NodeName string
	// NodeIP is the node's primary address.
	NodeIP string
	// ExtraArgs are kube-proxy flags, applied last (--kube-proxy-arg).
	ExtraArgs []string
}

// Args are the kube-proxy flags Options stand for, before ExtraArgs.
func (o Options) Args() []string {
	args := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--hostname-override=" + o.NodeName,
		"--proxy-mode=iptables",
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

// options parses Args into kube-proxy's options and checks them.
func options(o Options) (*app.Options, error) {
	if o.Kubeconfig == "" || o.NodeName == "" {
		return nil, fmt.Errorf("kube-proxy: Kubeconfig and NodeName are required")
	}
	ko := app.NewOptions()
	fs := pflag.NewFlagSet("kube-proxy", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	ko.AddFlags(fs)
	if err := fs.Parse(o.Args()); err != nil {
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

// Run runs kube-proxy until ctx ends. Like the kubelet, kube-proxy is not
// built to stop inside a process that goes on: Run returns when ctx ends,
// but its informers live until the process exits. Its rules stay, so
// Services keep working while the node agent restarts.
func Run(ctx context.Context, o Options) error {
	ko, err := options(o)
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
