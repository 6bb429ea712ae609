package reset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"

	"k8s.io/kubernetes/pkg/kubelet"
	proxyiptables "k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"k8s.io/kubernetes/pkg/proxy/nftables"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/sqlkube/sqlkube/node/podnet"
)

// kubeletCanaryChain is the chain the kubelet watches in the mangle, nat
// and filter tables to learn that its rules were flushed (a literal in
// the kubelet's kubelet_network_linux.go).
const kubeletCanaryChain = "KUBE-KUBELET-CANARY"

// The CNI portmap plugin's chains in the nat table, shared by every
// network that maps ports in this network namespace; each pod's mappings
// are a chain CNI-DN-HASH that CNI-HOSTPORT-DNAT jumps to with a comment
// naming the network and the sandbox.
var portmapChains = []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"}

// portmapComment matches the comment of CNI-HOSTPORT-DNAT's jumps as
// iptables-save quotes it: dnat name: "NETWORK" id: "CONTAINERID".
var portmapComment = regexp.MustCompile(`dnat name: \\"([^"\\]*)\\" id: \\"([^"\\]*)\\"`)

// tables are the tables the node's components write.
var tables = []utiliptables.Table{utiliptables.TableFilter, utiliptables.TableNAT, utiliptables.TableMangle}

// savedTable is one table of iptables-save.
type savedTable struct {
	chains []string // every chain, built-in ones too
	rules  []rule
}

type rule struct {
	chain, target string
	// spec is the line after "-A CHAIN".
	spec string
}

func saveTable(ipt utiliptables.Interface, table utiliptables.Table) (savedTable, error) {
	var buf bytes.Buffer
	if err := ipt.SaveInto(table, &buf); err != nil {
		return savedTable{}, err
	}
	return parseSave(buf.String()), nil
}

// parseSave parses one table of iptables-save.
func parseSave(s string) savedTable {
	var t savedTable
	for _, line := range strings.Split(s, "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			if f := strings.Fields(name); len(f) > 0 {
				t.chains = append(t.chains, f[0])
			}
			continue
		}
		rest, ok := strings.CutPrefix(line, "-A ")
		if !ok {
			continue
		}
		chain, spec, _ := strings.Cut(rest, " ")
		r := rule{chain: chain, spec: spec}
		f := strings.Fields(spec)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "-j" || f[i] == "-g" {
				r.target = f[i+1]
			}
		}
		t.rules = append(t.rules, r)
	}
	return t
}

// removeChains flushes and deletes chains of table, with every rule of
// another chain that jumps to one of them, in one iptables-restore.
// Chains that are not there are skipped; it returns those deleted.
func removeChains(ipt utiliptables.Interface, table utiliptables.Table, chains []string) ([]string, error) {
	saved, err := saveTable(ipt, table)
	if err != nil {
		return nil, err
	}
	return removeSavedChains(ipt, table, saved, chains)
}

func removeSavedChains(ipt utiliptables.Interface, table utiliptables.Table, saved savedTable, chains []string) ([]string, error) {
	var del []string
	for _, c := range chains {
		if slices.Contains(saved.chains, c) && !slices.Contains(del, c) {
			del = append(del, c)
		}
	}
	if len(del) == 0 {
		return nil, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", table)
	for _, c := range del {
		b.WriteString(utiliptables.MakeChainLine(utiliptables.Chain(c)) + "\n") // flush
	}
	for _, r := range saved.rules {
		if slices.Contains(del, r.target) && !slices.Contains(del, r.chain) {
			fmt.Fprintf(&b, "-D %s %s\n", r.chain, r.spec)
		}
	}
	for _, c := range del {
		fmt.Fprintf(&b, "-X %s\n", c)
	}
	b.WriteString("COMMIT\n")
	if err := ipt.Restore(table, []byte(b.String()), utiliptables.NoFlushTables, utiliptables.NoRestoreCounters); err != nil {
		return nil, fmt.Errorf("%s: remove chains %s: %w", table, strings.Join(del, ", "), err)
	}
	return del, nil
}

// iptablesClients are the host's iptables, IPv4 and (where present) IPv6.
func iptablesClients() []utiliptables.Interface {
	var out []utiliptables.Interface
	for _, ipt := range utiliptables.NewBestEffort() {
		out = append(out, ipt)
	}
	sort.Slice(out, func(i, j int) bool { return !out[i].IsIPv6() && out[j].IsIPv6() })
	return out
}

// podNetworkRules removes the pod network's rules of the nat table: the
// masquerade chain of podCIDR ("" for none) with POSTROUTING's jump to it,
// and the portmap plugin's chains of the sandboxes (their host ports),
// then portmap's own chains when no other network's mapping is left in
// them. It returns the chains removed.
func podNetworkRules(ipt utiliptables.Interface, podCIDR string, sandboxes map[string]bool) ([]string, error) {
	saved, err := saveTable(ipt, utiliptables.TableNAT)
	if err != nil {
		return nil, err
	}
	var chains []string
	if podCIDR != "" && !ipt.IsIPv6() {
		chains = append(chains, podnet.MasqueradeChain(podCIDR))
	}
	others := 0 // other networks' mappings
	for _, r := range saved.rules {
		if r.chain != portmapChains[0] {
			continue
		}
		m := portmapComment.FindStringSubmatch(r.spec)
		if m != nil && m[1] == podnet.NetworkName && sandboxes[m[2]] && r.target != "" {
			chains = append(chains, r.target)
		} else {
			others++
		}
	}
	if others == 0 {
		chains = append(chains, portmapChains...)
	}
	return removeSavedChains(ipt, utiliptables.TableNAT, saved, chains)
}

// kubeletRules removes the chains the kubelet makes in every table:
// KUBE-IPTABLES-HINT, KUBE-FIREWALL (with INPUT's and OUTPUT's jumps) and
// its canaries.
func kubeletRules(ipt utiliptables.Interface) error {
	var errs []error
	for _, table := range tables {
		chains := []string{kubeletCanaryChain}
		switch table {
		case utiliptables.TableMangle:
			chains = append(chains, string(kubelet.KubeIPTablesHintChain))
		case utiliptables.TableFilter:
			chains = append(chains, string(kubelet.KubeFirewallChain))
		}
		_, err := removeChains(ipt, table, chains)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// chainSet lists every chain of tables, as "FAMILY TABLE CHAIN".
func chainSet(ipts []utiliptables.Interface) map[string]bool {
	set := map[string]bool{}
	for _, ipt := range ipts {
		for _, table := range tables {
			saved, err := saveTable(ipt, table)
			if err != nil {
				continue
			}
			for _, c := range saved.chains {
				set[fmt.Sprintf("%s %s %s", family(ipt), table, c)] = true
			}
		}
	}
	return set
}

func family(ipt utiliptables.Interface) string {
	if ipt.IsIPv6() {
		return "ip6tables"
	}
	return "iptables"
}

// kubeProxyTable is kube-proxy's nftables table (in the ip and ip6
// families), which its nftables mode owns whole.
const kubeProxyTable = "kube-proxy"

// nftTables lists which of kube-proxy's nftables tables exist, as
// "nftables FAMILY TABLE".
func nftTables(ctx context.Context) []string {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil
	}
	var out []string
	for _, fam := range []string{"ip", "ip6"} {
		if exec.CommandContext(ctx, "nft", "list", "table", fam, kubeProxyTable).Run() == nil {
			out = append(out, fmt.Sprintf("nftables %s %s", fam, kubeProxyTable))
		}
	}
	return out
}

// cleanupKubeProxy removes kube-proxy's rules of every mode with
// kube-proxy's own code, as `kube-proxy --cleanup` does: iptables,
// nftables, and IPVS where the kernel has it loaded (its cleanup would
// load the module otherwise, and it flushes every IPVS service of the
// network namespace).
func cleanupKubeProxy(ctx context.Context) error {
	failed := proxyiptables.CleanupLeftovers(ctx)
	if _, err := os.Stat("/sys/module/ip_vs"); err == nil {
		failed = ipvs.CleanupLeftovers(ctx) || failed
	}
	if _, err := exec.LookPath("nft"); err == nil {
		failed = nftables.CleanupLeftovers(ctx) || failed
	}
	if failed {
		return errors.New("kube-proxy's cleanup failed in part (logged above)")
	}
	return nil
}
