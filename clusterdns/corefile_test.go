package clusterdns

import (
	"net"
	"strings"
	"testing"
)

func TestConfig_Corefile(t *testing.T) {
	got, err := Config{Address: net.ParseIP("192.0.2.7"), Port: 1053}.Corefile()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		".:1053 {",
		"bind 192.0.2.7",
		"disable success cluster.local",
		directive + " cluster.local in-addr.arpa ip6.arpa {",
		"pods insecure",
		"fallthrough in-addr.arpa ip6.arpa",
		"forward . /etc/resolv.conf",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, got)
		}
	}
	got, err = Config{Address: net.ParseIP("192.0.2.7"), Port: 53, Domain: "example.internal.", Upstreams: []string{"192.0.2.1", "192.0.2.2:5353"}}.Corefile()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, directive+" example.internal in-addr.arpa") || !strings.Contains(got, "forward . 192.0.2.1 192.0.2.2:5353\n") {
		t.Errorf("Corefile:\n%s", got)
	}
}

func TestConfig_CorefileInvalid(t *testing.T) {
	ip := net.ParseIP("192.0.2.7")
	for name, c := range map[string]Config{
		"no address":        {Port: 53},
		"port":              {Address: ip, Port: 70000},
		"domain":            {Address: ip, Port: 53, Domain: "Not A Domain"},
		"upstream injected": {Address: ip, Port: 53, Upstreams: []string{"1.1.1.1 }\n. {"}},
		"empty upstream":    {Address: ip, Port: 53, Upstreams: []string{""}},
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := c.Corefile(); err == nil {
				t.Fatalf("no error; Corefile:\n%s", got)
			}
		})
	}
}

func TestServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.96.0.0/12":   "10.96.0.10",
		"10.43.0.0/16":   "10.43.0.10",
		"192.168.1.0/28": "192.168.1.10",
		"10.0.0.255/24":  "10.0.0.10",
	} {
		got, err := ServiceIP(cidr)
		if err != nil || got.String() != want {
			t.Errorf("ServiceIP(%s) = %v, %v; want %s", cidr, got, err, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/29", "fd00::/108", "nonsense"} {
		if got, err := ServiceIP(bad); err == nil {
			t.Errorf("ServiceIP(%s) = %v, want an error", bad, got)
		}
	}
}
