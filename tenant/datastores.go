package tenant

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/sqlkube/sqlkube/datastore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
)

// Datastore is a place where the host keeps tenants' data, by name
// (Spec.Datastore, Status.Datastore).
type Datastore struct {
	// Name is what a Tenant calls it: a lowercase DNS label.
	Name string
	// Shared is the PostgreSQL database that keeps each tenant in a
	// schema and a role of its own, on its bounded pool. nil: a SQLite
	// file each, under the host's DataDir/tenants/NAME.
	Shared *sqlstore.Shared
}

// Names of the host's datastores that need no flag.
const (
	// SQLiteDatastore is always one of the host's datastores: a SQLite
	// file per tenant under DataDir/tenants/NAME.
	SQLiteDatastore = "sqlite"
	// DefaultDatastore is what HostConfig.Shared (`sqlkube host
	// --tenant-datastore DSN`, without a name) is called.
	DefaultDatastore = "default"
)

var datastoreNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidDatastoreName reports why name cannot name a datastore ("" when
// it can).
func ValidDatastoreName(name string) string {
	if !datastoreNameRE.MatchString(name) {
		return "a datastore's name is a lowercase DNS label"
	}
	return ""
}

// datastores indexes cfg's datastores and picks the default one.
func datastores(cfg *HostConfig) (map[string]*Datastore, string, error) {
	all := map[string]*Datastore{SQLiteDatastore: {Name: SQLiteDatastore}}
	list := cfg.Datastores
	if cfg.Shared != nil {
		list = append([]Datastore{{Name: DefaultDatastore, Shared: cfg.Shared}}, list...)
	}
	for _, d := range list {
		if why := ValidDatastoreName(d.Name); why != "" {
			return nil, "", fmt.Errorf("datastore %q: %s", d.Name, why)
		}
		if _, dup := all[d.Name]; dup {
			return nil, "", fmt.Errorf("datastore %q is given twice (%q names the SQLite files under the data directory)", d.Name, SQLiteDatastore)
		}
		if d.Shared == nil {
			return nil, "", fmt.Errorf("datastore %q has no database", d.Name)
		}
		all[d.Name] = &Datastore{Name: d.Name, Shared: d.Shared}
	}
	def := cfg.DefaultDatastore
	switch {
	case def == "" && cfg.Shared != nil:
		def = DefaultDatastore
	case def == "":
		def = SQLiteDatastore
	case all[def] == nil:
		return nil, "", fmt.Errorf("the default datastore %q is not one of the host's", def)
	}
	return all, def, nil
}

// datastore is the host's datastore called name (nil: none).
func (h *Host) datastore(name string) *Datastore { return h.stores[name] }

// datastoreNames lists the host's datastores' names, sorted.
func (h *Host) datastoreNames() string {
	var names []string
	for n := range h.stores {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// initialDatastore is where a new tenant is placed: the datastore its
// spec names, or the host's default ("" when the spec names none of
// the host's).
func (h *Host) initialDatastore(t *Tenant) string {
	name := t.Spec.Datastore
	if name == "" {
		name = h.defaultStore
	}
	if h.datastore(name) == nil {
		return ""
	}
	return name
}

// currentDatastore is the datastore name t's status says its data is in,
// read as the hosts before named datastores wrote it ("postgres schema
// tenant_NAME" for the one PostgreSQL database, "sqlite://PATH").
func (h *Host) currentDatastore(t *Tenant) string {
	s := t.Status.Datastore
	switch {
	case strings.HasPrefix(s, "postgres schema ") && h.datastore(DefaultDatastore) != nil:
		return DefaultDatastore
	case strings.HasPrefix(s, "sqlite://"):
		return SQLiteDatastore
	}
	return s
}

// sqlitePath is tenant name's SQLite file.
func (h *Host) sqlitePath(name string) string { return filepath.Join(h.tenantDir(name), "state.db") }

// hasData reports whether ds holds a place for tenant name: its schema,
// or its SQLite file.
func (h *Host) hasData(ctx context.Context, ds *Datastore, name string) (bool, error) {
	if ds.Shared != nil {
		return ds.Shared.Provisioned(ctx, sqlTenant(name))
	}
	_, err := os.Stat(h.sqlitePath(name))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// openSource opens tenant name's data on ds for reading, in one snapshot:
// the tenant may run meanwhile.
func (h *Host) openSource(ctx context.Context, ds *Datastore, name string) (datastore.Source, error) {
	if ds.Shared == nil {
		return datastore.OpenSource(ctx, "sqlite://"+h.sqlitePath(name))
	}
	e, err := ds.Shared.OpenExport(ctx, sqlTenant(name))
	if err != nil {
		return nil, err
	}
	return datastore.NewSQLSource(e), nil
}

// copyInto replaces tenant name's data on ds with src's (its place made
// first), then reads it back and checks it (datastore.CopyVerified).
// Nothing of it is visible before it commits; the tenant must not run
// on ds meanwhile.
func (h *Host) copyInto(ctx context.Context, src datastore.Source, ds *Datastore, name string) (*datastore.Result, error) {
	var dst datastore.Sink
	var reopen func(context.Context) (datastore.Source, error)
	if ds.Shared == nil {
		if err := os.MkdirAll(h.tenantDir(name), 0o700); err != nil {
			return nil, err
		}
		dsn := "sqlite://" + h.sqlitePath(name)
		var err error
		if dst, err = datastore.OpenSink(ctx, dsn, true); err != nil {
			return nil, err
		}
		reopen = func(ctx context.Context) (datastore.Source, error) { return datastore.OpenSource(ctx, dsn) }
	} else {
		t := sqlTenant(name)
		if err := ds.Shared.Provision(ctx, t); err != nil {
			return nil, fmt.Errorf("provision: %w", err)
		}
		im, err := ds.Shared.OpenImport(ctx, t, true)
		if err != nil {
			return nil, err
		}
		dst = datastore.NewSQLSink(im)
		reopen = func(ctx context.Context) (datastore.Source, error) { return h.openSource(ctx, ds, name) }
	}
	return datastore.CopyVerified(ctx, src, dst, reopen, false, datastore.Options{})
}

// dropCopy removes tenant name's data from ds: its schema and role (the
// role stays while the tenant has a schema in another database of the
// same server), or its SQLite file (not the tenant's directory, which
// holds its certificates). Dropped already is no error.
func (h *Host) dropCopy(ctx context.Context, ds *Datastore, name string) error {
	if ds.Shared != nil {
		return ds.Shared.Drop(ctx, sqlTenant(name))
	}
	db := h.sqlitePath(name)
	for _, suffix := range []string{"", "-wal", "-shm", "-journal", "-reserve"} {
		if err := os.Remove(db + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// lockTenant serializes what reads or replaces tenant name's data as a
// whole (a move, a backup, a restore, a delete); it returns the unlock.
func (h *Host) lockTenant(name string) func() {
	v, _ := h.dataLocks.LoadOrStore(name, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// placeName names what holds tenant name's data on ds.
func (h *Host) placeName(ds *Datastore, name string) string {
	if ds.Shared != nil {
		return "schema " + sqlTenant(name).Schema
	}
	return h.sqlitePath(name)
}
