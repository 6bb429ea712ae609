package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/apiserver/pki"
)

func newCertsCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Inspect and renew the certificates under DATA_DIR/tls",
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "./sqlkube-data", "the server's --data-dir")
	cmd.AddCommand(&cobra.Command{
		Use:   "rotate",
		Short: "Renew the leaf certificates (serving, admin, etcd) with the same CAs and update the kubeconfig",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return rotateCerts(dataDir, cmd.OutOrStdout())
		},
	}, &cobra.Command{
		Use:   "check-expiry",
		Short: "List each certificate's expiry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printExpiry(filepath.Join(dataDir, "tls"), cmd.OutOrStdout())
		},
	})
	return cmd
}

// rotateCerts renews the leaves under dataDir/tls and puts the new admin
// certificate into dataDir/kubeconfig when that embeds the old one.
func rotateCerts(dataDir string, out io.Writer) error {
	dir := filepath.Join(dataDir, "tls")
	renewed, err := pki.Rotate(dir)
	if err != nil {
		return err
	}
	for _, p := range renewed {
		fmt.Fprintf(out, "renewed %s\n", p)
	}
	switch err := refreshKubeconfig(filepath.Join(dataDir, "kubeconfig"), pki.FilesIn(dir)); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("kubeconfig: %w", err)
	default:
		fmt.Fprintf(out, "updated %s\n", filepath.Join(dataDir, "kubeconfig"))
	}
	return printExpiry(dir, out)
}

// refreshKubeconfig replaces the admin credentials embedded in the
// kubeconfig at path (os.ErrNotExist if there is none to update).
func refreshKubeconfig(path string, files pki.Files) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		if _, statErr := os.Stat(path); errors.Is(statErr, os.ErrNotExist) {
			return os.ErrNotExist
		}
		return err
	}
	admin, ok := cfg.AuthInfos["admin"]
	if !ok || len(admin.ClientCertificateData) == 0 {
		return os.ErrNotExist // not ours, or it names the files, which are renewed in place
	}
	if admin.ClientCertificateData, err = os.ReadFile(files.AdminCert); err != nil {
		return err
	}
	if admin.ClientKeyData, err = os.ReadFile(files.AdminKey); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

func printExpiry(dir string, out io.Writer) error {
	certs, err := pki.Certificates(dir)
	if err != nil {
		return err
	}
	if len(certs) == 0 {
		return fmt.Errorf("no certificates under %s", dir)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tSUBJECT\tEXPIRES\tRESIDUAL TIME\tCA")
	for _, c := range certs {
		residual := time.Until(c.NotAfter).Round(time.Hour)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%dd\t%v\n", filepath.Base(c.Path), c.Subject, c.NotAfter.UTC().Format(time.RFC3339), int(residual.Hours()/24), c.CA)
	}
	return tw.Flush()
}
