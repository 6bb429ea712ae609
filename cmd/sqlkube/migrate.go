package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/migrations"
)

func newMigrateCommand() *cobra.Command {
	var dsn string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, revert or show the datastore schema",
	}
	cmd.PersistentFlags().StringVar(&dsn, "datastore", sqlstore.DefaultDSN, "datastore DSN: sqlite:///path, postgres://… or mysql://…")
	cmd.AddCommand(&cobra.Command{
		Use: "up", Short: "Apply every migration this binary knows", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := sqlstore.Migrate(context.Background(), dsn)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d\n", v)
			return nil
		},
	}, &cobra.Command{
		Use: "down", Short: "Revert every migration (drops all data)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sqlstore.MigrateDown(context.Background(), dsn); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "schema removed")
			return nil
		},
	}, &cobra.Command{
		Use: "version", Short: "Print the schema version", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := sqlstore.Dialect(dsn)
			if err != nil {
				return err
			}
			v, dirty, err := sqlstore.SchemaVersion(context.Background(), dsn)
			if err != nil {
				return err
			}
			latest, _ := migrations.Latest(d)
			fmt.Fprintf(cmd.OutOrStdout(), "version %d (dirty %v); this binary knows up to %d\n", v, dirty, latest)
			return nil
		},
	})
	return cmd
}
