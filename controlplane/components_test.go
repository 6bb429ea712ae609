package controlplane

import "testing"

func TestComponents_ControllerOptionsClientRate(t *testing.T) {
	for _, tc := range []struct {
		name            string
		args            []string
		wantQPS, wantBu string
	}{
		{"in-process default", nil, inProcessQPS, inProcessBurst},
		{"operator's qps", []string{"--kube-api-qps=25"}, "25", "30"},
		{"operator's burst", []string{"--kube-api-burst=40"}, "20", "40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &components{Components: &Components{Controllers: []string{"*"}, ControllerArgs: tc.args}}
			o, err := c.controllerOptions()
			if err != nil {
				t.Fatal(err)
			}
			fs := o.FlagSet()
			if got := fs.Lookup("kube-api-qps").Value.String(); got != tc.wantQPS {
				t.Errorf("kube-api-qps = %s, want %s", got, tc.wantQPS)
			}
			if got := fs.Lookup("kube-api-burst").Value.String(); got != tc.wantBu {
				t.Errorf("kube-api-burst = %s, want %s", got, tc.wantBu)
			}
		})
	}
}

func TestComponents_ControllerOptionsClusterCIDR(t *testing.T) {
	for _, tc := range []struct {
		name, cidr        string
		args              []string
		wantCIDR, wantAll string
	}{
		{"default", "10.42.0.0/16", nil, "10.42.0.0/16", "true"},
		{"none", "", nil, "", "false"},
		{"operator's controller flag", "10.42.0.0/16", []string{"--allocate-node-cidrs=false"}, "10.42.0.0/16", "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &components{Components: &Components{Controllers: []string{"*"}, ControllerArgs: tc.args, ClusterCIDR: tc.cidr}}
			o, err := c.controllerOptions()
			if err != nil {
				t.Fatal(err)
			}
			fs := o.FlagSet()
			if got := fs.Lookup("cluster-cidr").Value.String(); got != tc.wantCIDR {
				t.Errorf("cluster-cidr = %q, want %q", got, tc.wantCIDR)
			}
			if got := fs.Lookup("allocate-node-cidrs").Value.String(); got != tc.wantAll {
				t.Errorf("allocate-node-cidrs = %s, want %s", got, tc.wantAll)
			}
		})
	}
}
