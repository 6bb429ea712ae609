package kubeproxy

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	base := Options{Kubeconfig: "/n/kubelet.kubeconfig", NodeName: "n1", NodeIP: "192.168.1.5"}
	for _, tc := range []struct {
		name    string
		extra   []string
		wantErr string
	}{
		{name: "defaults"},
		{name: "nftables", extra: []string{"--proxy-mode=nftables"}},
		{name: "operator's masquerade-all", extra: []string{"--masquerade-all"}},
		{name: "unknown flag", extra: []string{"--no-such-flag"}, wantErr: "unknown flag"},
		{name: "bad mode", extra: []string{"--proxy-mode=carrier-pigeon"}, wantErr: "carrier-pigeon"},
		{name: "argument", extra: []string{"stray"}, wantErr: "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			o.ExtraArgs = tc.extra
			err := Check(o)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Check: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
	if err := Check(Options{NodeName: "n1"}); err == nil {
		t.Error("no kubeconfig: accepted")
	}
}

func TestOptions_Args(t *testing.T) {
	args := strings.Join(Options{Kubeconfig: "k", NodeName: "n1", NodeIP: "10.0.0.2", Mode: "iptables", ExtraArgs: []string{"--proxy-mode=nftables"}}.Args(), " ")
	for _, want := range []string{"--proxy-mode=iptables", "--hostname-override=n1", "--detect-local-mode=NodeCIDR", "--bind-address=10.0.0.2", "--conntrack-max-per-core=0"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	// The operator's flags come last, so they win.
	if !strings.HasSuffix(args, "--proxy-mode=nftables") {
		t.Errorf("args %q do not end with the extra ones", args)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.44-fc-v782": true, "5.13.0": true, "5.10.0-28-amd64": false, "5.15": true,
		"4.19.0": false, "5.13rc1": true, "": false, "garbage": false,
	} {
		if got := kernelAtLeast(release, 5, 13); got != want {
			t.Errorf("kernelAtLeast(%q, 5, 13) = %v, want %v", release, got, want)
		}
	}
}
