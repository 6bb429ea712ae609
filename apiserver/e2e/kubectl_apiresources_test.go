package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// normalizedLines is text's lines with runs of spaces made one, sorted.
func normalizedLines(text string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		out = append(out, strings.Join(strings.Fields(line), " "))
	}
	slices.Sort(out)
	return out
}

// TestKubectl_APIResources: `kubectl api-resources -o wide` prints what it
// prints against kube-apiserver v1.37.2 with default flags
// (../testdata/kube-apiserver-v1.37.2), line for line but for column
// widths, with each kubectl whose output has the reference's columns; and
// the resources added for controllers print as tables.
func TestKubectl_APIResources(t *testing.T) {
	bins := kubectls(t)
	want, err := os.ReadFile(filepath.Join("..", "testdata", "kube-apiserver-v1.37.2", "api-resources-wide.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wantLines := normalizedLines(string(want))
	s := startServer(t, t.TempDir())
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			out := s.mustKubectl(t, bin, "api-resources", "-o", "wide")
			got := normalizedLines(out)
			if strings.Fields(strings.SplitN(out, "\n", 2)[0])[6] != "CATEGORIES" {
				t.Logf("%s prints other columns; not compared:\n%s", name, out)
			} else if missing, extra := lineDiff(got, wantLines); len(missing)+len(extra) > 0 {
				t.Errorf("api-resources -o wide differs from kube-apiserver v1.37.2's:\nmissing:\n  %s\nextra:\n  %s",
					strings.Join(missing, "\n  "), strings.Join(extra, "\n  "))
			}
			out = s.mustKubectl(t, bin, "get", "cs,rc,podtemplates,hpa,sc,csinodes,vac,ingressclasses,ing,netpol,servicecidrs,ipaddresses,runtimeclasses,"+
				"deviceclasses,resourceslices,resourceclaims,validatingwebhookconfigurations,validatingadmissionpolicies,apiservices,flowschemas,prioritylevelconfigurations", "-A")
			for _, row := range []string{"componentstatus/etcd-0", "servicecidr.networking.k8s.io/kubernetes"} {
				if !strings.Contains(out, row) {
					t.Errorf("get: no %s in\n%s", row, out)
				}
			}
		})
	}
}

// lineDiff returns the lines of want not in got and of got not in want.
func lineDiff(got, want []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}
