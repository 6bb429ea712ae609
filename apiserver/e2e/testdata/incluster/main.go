// Command incluster is the client of the in-cluster test
// (realnode_incluster_test.go): run in a pod, it lists the pods of its
// namespace at each URL given, as client-go's in-cluster configuration
// does: the service account's token as a bearer token, the server's
// certificate verified with the mounted ca.crt for the URL's host. The URL
// "env" stands for https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
// Each URL is tried until it answers or -wait runs out (the cluster DNS
// and the Service's rules may come a little after the pod); one line per
// URL says how it went; the exit status is 1 if any failed.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	wait := flag.Duration("wait", 60*time.Second, "how long each URL is tried")
	flag.Parse()
	failed := false
	for _, u := range flag.Args() {
		if u == "env" {
			u = "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
		}
		n, err := listUntil(u, *wait)
		if err != nil {
			failed = true
			fmt.Printf("FAIL %s: %v\n", u, err)
			continue
		}
		fmt.Printf("OK %s: %d pods, this one among them\n", u, n)
	}
	if failed {
		os.Exit(1)
	}
}

// listUntil lists the pods at base until it works or wait runs out.
func listUntil(base string, wait time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := list(ctx, base)
		var tlsErr *tls.CertificateVerificationError
		if err == nil || errors.As(err, &tlsErr) {
			return n, err // a certificate that does not verify never will
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-tick.C:
		}
	}
}

// list GETs base/api/v1/namespaces/NS/pods and checks this pod is there.
func list(ctx context.Context, base string) (int, error) {
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return 0, err
	}
	ns, err := os.ReadFile(saDir + "/namespace")
	if err != nil {
		return 0, err
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return 0, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return 0, errors.New("ca.crt holds no certificate")
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/namespaces/"+string(ns)+"/pods", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var pods podList
	if err := json.Unmarshal(body, &pods); err != nil {
		return 0, err
	}
	self, _ := os.Hostname() // the pod's name
	if !slices.ContainsFunc(pods.Items, func(p pod) bool { return p.Metadata.Name == self }) {
		return 0, fmt.Errorf("%d pods, not %s", len(pods.Items), self)
	}
	return len(pods.Items), nil
}

// podList is what this client reads of a PodList.
type podList struct {
	Items []pod `json:"items"`
}

type pod struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
}
