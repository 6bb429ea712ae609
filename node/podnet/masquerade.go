package podnet

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// syncMasquerade writes the node's masquerade chain: its pods' packets to
// any node's pod CIDR keep their source address, the rest leave with the
// host's. POSTROUTING jumps to it for packets from the node's pod CIDR.
// (kube-proxy's KUBE-POSTROUTING masquerades what it marked, before it.)
func (a *agent) syncMasquerade(ctx context.Context, podCIDR string, cidrs []string) error {
	chain := MasqueradeChain(podCIDR)
	var b strings.Builder
	fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n", chain)
	for _, c := range cidrs {
		fmt.Fprintf(&b, "-A %s -d %s -j RETURN\n", chain, c)
	}
	fmt.Fprintf(&b, "-A %s -j MASQUERADE\nCOMMIT\n", chain)
	if b.String() != a.masq {
		// --noflush keeps every other chain; the declared one is emptied
		// and rewritten in one transaction.
		cmd := exec.CommandContext(ctx, "iptables-restore", "-w", "--noflush")
		cmd.Stdin = strings.NewReader(b.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-restore: %v: %s", err, out)
		}
		a.masq = b.String()
	}
	jump := []string{"POSTROUTING", "-s", podCIDR, "-m", "comment", "--comment", MasqueradeComment(podCIDR), "-j", chain}
	if iptables(ctx, append([]string{"-t", "nat", "-C"}, jump...)...) == nil {
		return nil
	}
	return iptables(ctx, append([]string{"-t", "nat", "-A"}, jump...)...)
}

func iptables(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
