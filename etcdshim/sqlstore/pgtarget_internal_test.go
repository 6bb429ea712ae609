package sqlstore

import (
	"strings"
	"testing"
)

func TestWritablePostgresDSN(t *testing.T) {
	t.Setenv("PGTARGETSESSIONATTRS", "")
	for _, c := range []struct {
		dsn, want, err string
	}{
		// One host: left as it is, unless it asks for a standby.
		{dsn: "postgres://u@a:5432/db", want: "postgres://u@a:5432/db"},
		{dsn: "postgres://u@a:5432/db?target_session_attrs=any", want: "postgres://u@a:5432/db?target_session_attrs=any"},
		{dsn: "postgres://u@a/db?target_session_attrs=standby", err: "connects to a standby"},
		// Several hosts: read-write unless the DSN says read-write or primary.
		{dsn: "postgres://u:pw@a:5432,b:5433/db", want: "postgres://u:pw@a:5432,b:5433/db?target_session_attrs=read-write"},
		{dsn: "postgres://u@a,b/db?sslmode=disable", want: "postgres://u@a,b/db?sslmode=disable&target_session_attrs=read-write"},
		{dsn: "postgres://u@a,b/db?target_session_attrs=read-write", want: "postgres://u@a,b/db?target_session_attrs=read-write"},
		{dsn: "postgresql://u@a,b/db?target_session_attrs=primary", want: "postgresql://u@a,b/db?target_session_attrs=primary"},
		{dsn: "postgres://u:secret@a,b/db?target_session_attrs=any", err: "may connect to a standby"},
		{dsn: "postgres://u@a,b/db?target_session_attrs=prefer-standby", err: "connects to a standby"},
		{dsn: "postgres://u@a,b/db?target_session_attrs=read-only", err: "connects to a standby"},
		{dsn: "postgres://u@a,b/db?target_session_attrs=sometimes", err: "unknown target_session_attrs"},
		// The same host twice is one host.
		{dsn: "postgres://u@a:5432,a:5432/db", want: "postgres://u@a:5432,a:5432/db"},
	} {
		got, err := writablePostgresDSN(c.dsn)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("writablePostgresDSN(%q) = %q, %v; want an error saying %q", c.dsn, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("writablePostgresDSN(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("writablePostgresDSN(%q): the error shows the password: %v", c.dsn, err)
		}
	}
}

func TestWritablePostgresDSN_Environment(t *testing.T) {
	t.Setenv("PGTARGETSESSIONATTRS", "standby")
	if got, err := writablePostgresDSN("postgres://u@a,b/db"); err == nil || !strings.Contains(err.Error(), "PGTARGETSESSIONATTRS=standby") {
		t.Errorf("with PGTARGETSESSIONATTRS=standby: %q, %v; want an error naming it", got, err)
	}
	t.Setenv("PGTARGETSESSIONATTRS", "primary")
	if got, err := writablePostgresDSN("postgres://u@a,b/db"); err != nil || got != "postgres://u@a,b/db" {
		t.Errorf("with PGTARGETSESSIONATTRS=primary: %q, %v; want the DSN unchanged", got, err)
	}
}
