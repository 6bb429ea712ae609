package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sqlkube/sqlkube/datastore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

func newDatastoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "datastore",
		Short: "Move, back up and restore a cluster's data between datastores",
		Long: `Move, back up and restore a cluster's data.

A datastore is a DSN: sqlite:///path, postgres://…, mysql://…, or an etcd
endpoint etcd://host:port[,host:port] (etcds://…?cacert=F&cert=F&key=F for
TLS). A source may also be a file: an etcd snapshot ('etcdctl snapshot
save'), a sqlkube dump, or a SQLite backup. Stop the servers that use the
target first; the source may stay in use (it is read in one snapshot).`,
	}
	cmd.AddCommand(newDatastoreMigrateCommand(), newDatastoreBackupCommand(), newDatastoreRestoreCommand())
	return cmd
}

func printResult(w io.Writer, verb string, res *datastore.Result) {
	fmt.Fprintf(w, "%s %s to %s: %d keys, %d leases", verb, res.From, res.To, res.Keys, res.Leases)
	if res.Source.History {
		fmt.Fprintf(w, ", %d log rows", res.LogRows)
	}
	fmt.Fprintf(w, " at revision %d (checksum %s, verified) in %s\n", res.Source.Revision, res.Checksum[:16], res.Took.Round(1e6))
}

func newDatastoreMigrateCommand() *cobra.Command {
	var from, to string
	var force, quiet bool
	cmd := &cobra.Command{
		Use:   "migrate --from SOURCE --to TARGET",
		Short: "Copy every key, lease and the revision from one datastore into another, then verify it",
		Long: `Copy a datastore into another and verify the copy (key count and a
checksum of keys, values and leases, and the revision).

SQL to SQL copies sqlkube's tables as they are: history back to the last
compaction, revisions, leases with their expiry. From etcd (an endpoint or
a snapshot file) the current state comes with its revisions; the target is
compacted at etcd's revision and continues after it. Into etcd, etcd
assigns new revisions; its revision is then advanced (with throwaway
writes) to the source's, so it continues after it too.

A target that holds data is refused unless --force, which replaces it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return fmt.Errorf("--from and --to are required")
			}
			// SIGINT/SIGTERM stop the copy; a SQL target is left as it was.
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			opts := datastore.Options{}
			if !quiet {
				opts.Progress = cmd.ErrOrStderr()
			}
			res, err := datastore.Migrate(ctx, from, to, force, opts)
			if err != nil {
				return err
			}
			printResult(cmd.OutOrStdout(), "copied", res)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "source: a datastore DSN, etcd://host:port, or a file (etcd snapshot, sqlkube dump, SQLite backup)")
	cmd.Flags().StringVar(&to, "to", "", "target: a datastore DSN, etcd://host:port, or a file path (written as a sqlkube dump)")
	cmd.Flags().BoolVar(&force, "force", false, "replace the target's contents if it holds data")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

func newDatastoreBackupCommand() *cobra.Command {
	var dsn, to string
	var force, dump, quiet bool
	cmd := &cobra.Command{
		Use:   "backup --to FILE",
		Short: "Write a consistent backup of a datastore while it is in use",
		Long: `Write a consistent backup of a datastore while it is in use.

SQLite is copied with VACUUM INTO into a SQLite file (open it with
sqlite3, or restore it). PostgreSQL, MySQL and etcd endpoints (and SQLite
with --dump) are written as a sqlkube dump: gzip'd JSON lines holding the
revision counters, every lease, every live key and the revision log, read
in one snapshot transaction, and closed by an end record with counts and a
checksum. Restore either with 'sqlkube datastore restore'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return fmt.Errorf("--to is required")
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			opts := datastore.Options{}
			if !quiet {
				opts.Progress = cmd.ErrOrStderr()
			}
			res, err := datastore.Backup(ctx, dsn, to, dump, force, opts)
			if err != nil {
				return err
			}
			printResult(cmd.OutOrStdout(), "backed up", res)
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "datastore", sqlstore.DefaultDSN, "datastore to back up: sqlite:///path, postgres://…, mysql://… or etcd://host:port")
	cmd.Flags().StringVar(&to, "to", "", "backup file to write (refused if it exists, unless --force)")
	cmd.Flags().BoolVar(&dump, "dump", false, "write a sqlkube dump even for SQLite")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite the backup file")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

func newDatastoreRestoreCommand() *cobra.Command {
	var from, to string
	var force, quiet bool
	cmd := &cobra.Command{
		Use:   "restore --from FILE --to DSN",
		Short: "Restore a backup (or an etcd snapshot) into a datastore",
		Long: `Restore a backup written by 'sqlkube datastore backup' (a SQLite file or
a sqlkube dump), or an etcd snapshot, into a datastore of any kind, then
verify it. The same as 'sqlkube datastore migrate --from FILE --to DSN'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return fmt.Errorf("--from and --to are required")
			}
			if _, err := os.Stat(from); err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			opts := datastore.Options{}
			if !quiet {
				opts.Progress = cmd.ErrOrStderr()
			}
			res, err := datastore.Migrate(ctx, from, to, force, opts)
			if err != nil {
				return err
			}
			printResult(cmd.OutOrStdout(), "restored", res)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "backup file: a SQLite backup, a sqlkube dump, or an etcd snapshot")
	cmd.Flags().StringVar(&to, "to", sqlstore.DefaultDSN, "datastore to restore into (refused if it holds data, unless --force)")
	cmd.Flags().BoolVar(&force, "force", false, "replace the target's contents if it holds data")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}
