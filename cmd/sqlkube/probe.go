package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// newProbeCommand is a health check for images without a shell or curl
// (the sqlkube image is distroless): GET a URL, exit 0 on a 2xx answer.
func newProbeCommand() *cobra.Command {
	var caFile string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "GET a URL and exit 0 on a 2xx answer (a container health check, e.g. https://127.0.0.1:6443/readyz)",
		Long: "GET a URL and exit 0 on a 2xx answer, 1 otherwise: a health check for containers without curl.\n" +
			"Without --cacert an HTTPS server's certificate is not verified (probe your own process only).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: caFile == ""} //nolint:gosec // a local health check, unless --cacert
			if caFile != "" {
				pem, err := os.ReadFile(caFile)
				if err != nil {
					return err
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return fmt.Errorf("--cacert %s: no certificate", caFile)
				}
				tlsCfg.RootCAs = pool
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
			if err != nil {
				return err
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("%s: %s %s", args[0], resp.Status, body)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", body)
			return nil
		},
	}
	cmd.Flags().StringVar(&caFile, "cacert", "", "CA bundle that verifies an HTTPS server")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	return cmd
}
