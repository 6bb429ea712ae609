package sqlstore

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// writablePostgresDSN returns a PostgreSQL DSN that connects only to a
// server that takes writes. A DSN may name several hosts
// (postgres://u@a:5432,b:5432/db), a primary and its standbys, so that
// after a failover new connections find the promoted one; pgx tries them
// in order. Which one it keeps is target_session_attrs' business: with
// libpq's default, any, it keeps the first that answers, which may be a
// standby. A store there could not write, and worse, would read a
// standby's replay, which may trail commits the primary has acknowledged.
// So a DSN with several hosts and no target_session_attrs (in the DSN or
// PGTARGETSESSIONATTRS) gets read-write; read-write and primary are kept;
// any other value is refused with several hosts, and read-only, standby
// and prefer-standby with one too. The DSN is otherwise returned as it
// was given, for every connection the store opens to use: its pool, its
// LISTEN connection, migrations and the database's creation.
func writablePostgresDSN(dsn string) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("sqlstore: parse postgres datastore: %w", err)
	}
	hosts := map[string]bool{fmt.Sprintf("%s:%d", cfg.Host, cfg.Port): true}
	for _, fb := range cfg.Fallbacks {
		hosts[fmt.Sprintf("%s:%d", fb.Host, fb.Port)] = true // sslmode=prefer tries each host twice
	}
	attrs, fromEnv := "", false
	if i := strings.IndexByte(dsn, '?'); i >= 0 {
		q, err := url.ParseQuery(dsn[i+1:])
		if err != nil {
			return "", fmt.Errorf("sqlstore: parse postgres datastore: %w", err)
		}
		attrs = q.Get("target_session_attrs")
	}
	if attrs == "" {
		attrs, fromEnv = os.Getenv("PGTARGETSESSIONATTRS"), true
	}
	source := "target_session_attrs=" + attrs
	if fromEnv {
		source = "PGTARGETSESSIONATTRS=" + attrs
	}
	switch attrs {
	case "read-write", "primary":
		return dsn, nil
	case "":
		if len(hosts) == 1 {
			return dsn, nil
		}
		if strings.Contains(dsn, "?") {
			return dsn + "&target_session_attrs=read-write", nil
		}
		return dsn + "?target_session_attrs=read-write", nil
	case "any":
		if len(hosts) == 1 {
			return dsn, nil
		}
		return "", fmt.Errorf("sqlstore: postgres datastore %s: %s with several hosts may connect to a standby; sqlkube writes, so it needs read-write (the default with several hosts) or primary", redact(dsn), source)
	default:
		return "", fmt.Errorf("sqlstore: postgres datastore %s: %s connects to a standby; sqlkube writes, so it needs read-write or primary", redact(dsn), source)
	}
}
