package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/node/containerd"
)

func newImagesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Manage the images of this host's node",
	}
	cmd.AddCommand(newImagesImportCommand())
	return cmd
}

func newImagesImportCommand() *cobra.Command {
	var dataDir, endpoint string
	cmd := &cobra.Command{
		Use:   "import FILE.tar...",
		Short: "Load image archives (OCI layout or docker save) into the node's runtime, for machines without a registry",
		Long: "Load image archives (OCI image layout or `docker save` tar files) into the containerd of this\n" +
			"host's node, in its k8s.io namespace where the kubelet finds them. With --data-dir (default\n" +
			"./sqlkube-data), into the containerd that `sqlkube server --data-dir DIR` started; with\n" +
			"--container-runtime-endpoint, into that containerd. Pods use them with imagePullPolicy\n" +
			"IfNotPresent (or Never), and a tag other than latest.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep := endpoint
			if ep == "" {
				dir, err := filepath.Abs(dataDir)
				if err != nil {
					return err
				}
				ep = containerd.Endpoint(containerdDirOf(dir))
			}
			for _, a := range args {
				out, err := containerd.Import(cmd.Context(), selfCommand("ctr"), ep, a)
				if err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), out)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "./sqlkube-data", "data directory of the `sqlkube server` whose containerd gets the images")
	cmd.Flags().StringVar(&endpoint, "container-runtime-endpoint", "", "containerd endpoint (unix://PATH) instead of --data-dir's")
	return cmd
}
