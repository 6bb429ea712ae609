package reset

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	iptablestest "k8s.io/kubernetes/pkg/util/iptables/testing"

	"github.com/sqlkube/sqlkube/node/podnet"
)

// savedIPTables answers iptables-save with fixed tables and records what
// is restored.
type savedIPTables struct {
	*iptablestest.FakeIPTables
	tables   map[utiliptables.Table]string
	restored []string
}

func (f *savedIPTables) SaveInto(table utiliptables.Table, buf *bytes.Buffer) error {
	buf.WriteString(f.tables[table])
	return nil
}

func (f *savedIPTables) Restore(table utiliptables.Table, data []byte, _ utiliptables.FlushFlag, _ utiliptables.RestoreCountersFlag) error {
	f.restored = append(f.restored, string(data))
	return nil
}

// natTable is a node's nat table (iptables-save): its masquerade chain, a
// host port of one of its pods and one of another network's.
func natTable(podCIDR, otherPortmap string) string {
	chain := podnet.MasqueradeChain(podCIDR)
	return `*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-DN-ours - [0:0]
:CNI-DN-theirs - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-HOSTPORT-MASQ - [0:0]
:CNI-HOSTPORT-SETMARK - [0:0]
:` + chain + ` - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A POSTROUTING -s ` + podCIDR + ` -m comment --comment "` + podnet.MasqueradeComment(podCIDR) + `" -j ` + chain + `
-A CNI-DN-ours -p tcp -m tcp --dport 18080 -j DNAT --to-destination 10.42.0.2:8080
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"sqlkube\" id: \"aaaa\"" -m multiport --dports 18080 -j CNI-DN-ours
` + otherPortmap + `-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A ` + chain + ` -j MASQUERADE
COMMIT
`
}

func TestPodNetworkRules(t *testing.T) {
	const podCIDR = "10.42.0.0/24"
	chain := podnet.MasqueradeChain(podCIDR)
	for _, tc := range []struct {
		name, other string
		want        []string
	}{
		{"the node's alone", "", []string{chain, "CNI-DN-ours", "CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"}},
		{"another network maps ports", `-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"other\" id: \"bbbb\"" -m multiport --dports 80 -j CNI-DN-theirs` + "\n",
			[]string{chain, "CNI-DN-ours"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt := &savedIPTables{FakeIPTables: iptablestest.NewFake(), tables: map[utiliptables.Table]string{utiliptables.TableNAT: natTable(podCIDR, tc.other)}}
			got, err := podNetworkRules(ipt, podCIDR, map[string]bool{"aaaa": true})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("removed %v, want %v", got, tc.want)
			}
			if len(ipt.restored) != 1 {
				t.Fatalf("%d restores, want 1", len(ipt.restored))
			}
			script := ipt.restored[0]
			// Each chain is flushed and deleted, and the rules of the
			// chains that stay and jump to them are deleted first.
			for _, c := range tc.want {
				if !strings.Contains(script, ":"+c+" - [0:0]\n") || !strings.Contains(script, "-X "+c+"\n") {
					t.Errorf("chain %s is not flushed and deleted:\n%s", c, script)
				}
			}
			if !strings.Contains(script, "-D POSTROUTING -s "+podCIDR+" -m comment --comment \""+podnet.MasqueradeComment(podCIDR)+"\" -j "+chain+"\n") {
				t.Errorf("POSTROUTING's jump to %s stays:\n%s", chain, script)
			}
			if strings.Contains(script, "theirs") || strings.Contains(script, "-D CNI-DN-ours") {
				t.Errorf("the script touches another network's rules, or deletes rules of a chain it deletes:\n%s", script)
			}
			if d := strings.Index(script, "-D "); d < strings.LastIndex(script, " - [0:0]") || d > strings.Index(script, "-X ") {
				t.Errorf("not flushes, then deletions of rules, then of chains:\n%s", script)
			}
		})
	}
}

func TestPodNetworkRules_NothingThere(t *testing.T) {
	ipt := &savedIPTables{FakeIPTables: iptablestest.NewFake(), tables: map[utiliptables.Table]string{
		utiliptables.TableNAT: "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -j MASQUERADE\nCOMMIT\n",
	}}
	// No portmap chain at all: its chains are not there to remove.
	got, err := podNetworkRules(ipt, "10.42.0.0/24", nil)
	if err != nil || len(got) != 0 || len(ipt.restored) != 0 {
		t.Errorf("removed %v (%v), restored %q; want nothing", got, err, ipt.restored)
	}
}
