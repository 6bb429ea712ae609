package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlkube/sqlkube/migrations"
)

// A tenant is provisioned and dropped in steps, each of which may be run
// again after a crash at any point: a half-made tenant is finished by
// Provision and removed by Drop.
type provisionStep struct {
	name string
	run  func(ctx context.Context, h *Shared, t Tenant) error
}

func provisionSteps() []provisionStep {
	return []provisionStep{
		{"create role", createTenantRole},
		{"grant role to the host", grantTenantRole},
		{"create schema", createTenantSchema},
		{"migrate", migrateTenant},
		{"unfence", unfenceTenant},
	}
}

func dropSteps() []provisionStep {
	return []provisionStep{
		{"drop schema", dropTenantSchema},
		{"drop owned", dropTenantOwned},
		{"drop role", dropTenantRole},
	}
}

// Provision makes a tenant's place on the handle's database, or finishes
// one a crash left half-made: the role (NOLOGIN, no attributes), the host's
// membership in it (so the host may SET ROLE to it; without inheriting its
// privileges on PostgreSQL 16 and later, see docs/datastores.md for 15),
// the schema it owns, and the store's tables, created by the role in the
// schema. It refuses a role or schema of the same name that it did not
// make: a role that may log in or has any attribute, a schema another role
// owns.
func (h *Shared) Provision(ctx context.Context, t Tenant) error {
	return h.provisionUpTo(ctx, t, len(provisionSteps()))
}

func (h *Shared) provisionUpTo(ctx context.Context, t Tenant, n int) error {
	if err := t.validate(); err != nil {
		return err
	}
	for _, st := range provisionSteps()[:n] {
		if err := st.run(ctx, h, t); err != nil {
			return fmt.Errorf("sqlstore: provision tenant %s: %s: %w", t.Schema, st.name, err)
		}
	}
	return nil
}

// Provisioned reports whether the tenant's schema exists on the handle's
// database (made by Provision, perhaps not finished).
func (h *Shared) Provisioned(ctx context.Context, t Tenant) (bool, error) {
	if err := t.validate(); err != nil {
		return false, err
	}
	var ok bool
	err := h.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, t.Schema).Scan(&ok)
	return ok, err
}

// Drop removes a tenant's place and everything in it, or finishes removing
// one: its schema with its tables, whatever else the role owns in the
// database and the privileges granted to it, and the role. A tenant that
// does not exist is dropped already. Close the tenant's stores first.
//
// A role is the server's, not a database's: when the tenant also has a
// place in another database of the same server (a tenant moved from one
// database to another), the role still owns that one, and Drop keeps it
// (a later Drop there removes it).
func (h *Shared) Drop(ctx context.Context, t Tenant) error {
	return h.dropUpTo(ctx, t, len(dropSteps()))
}

func (h *Shared) dropUpTo(ctx context.Context, t Tenant, n int) error {
	if err := t.validate(); err != nil {
		return err
	}
	for _, st := range dropSteps()[:n] {
		if err := st.run(ctx, h, t); err != nil {
			return fmt.Errorf("sqlstore: drop tenant %s: %s: %w", t.Schema, st.name, err)
		}
	}
	return nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// isCode reports whether err is a PostgreSQL error with SQLSTATE code.
func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// roleState reads whether role exists and whether it is one Provision could
// have made (no login, no attribute).
func roleState(ctx context.Context, pool *pgxpool.Pool, role string) (exists, plain bool, err error) {
	var super, login, createRole, createDB, bypass, repl bool
	err = pool.QueryRow(ctx, `SELECT rolsuper, rolcanlogin, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication
 FROM pg_roles WHERE rolname = $1`, role).Scan(&super, &login, &createRole, &createDB, &bypass, &repl)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, !(super || login || createRole || createDB || bypass || repl), nil
}

func createTenantRole(ctx context.Context, h *Shared, t Tenant) error {
	exists, plain, err := roleState(ctx, h.pool, t.Role)
	if err != nil {
		return err
	}
	if !exists {
		_, err = h.pool.Exec(ctx, `CREATE ROLE `+ident(t.Role)+` NOLOGIN`)
		if err == nil || !isCode(err, "42710") { // duplicate_object: made meanwhile
			return err
		}
		if exists, plain, err = roleState(ctx, h.pool, t.Role); err != nil {
			return err
		}
	}
	if exists && !plain {
		return fmt.Errorf("role %q exists and may log in or has attributes: not a tenant role", t.Role)
	}
	return nil
}

// grantTenantRole makes the host's login role a member of the tenant's
// role, so it may SET ROLE to it. On PostgreSQL 16 and later the
// membership does not inherit the role's privileges (WITH INHERIT FALSE);
// on 15 it inherits unless the host's role is NOINHERIT. A superuser needs
// no membership.
func grantTenantRole(ctx context.Context, h *Shared, t Tenant) error {
	var super, inherit bool
	var version int
	if err := h.pool.QueryRow(ctx, `SELECT rolsuper, rolinherit, current_setting('server_version_num')::int
 FROM pg_roles WHERE rolname = current_user`).Scan(&super, &inherit, &version); err != nil {
		return err
	}
	if super {
		return nil
	}
	q := `GRANT ` + ident(t.Role) + ` TO CURRENT_USER`
	if version >= 160000 {
		q += ` WITH INHERIT FALSE, SET TRUE`
	} else if inherit {
		h.log.Warn().Str("role", t.Role).Msg("the host's role inherits the privileges of tenant roles (PostgreSQL 15): ALTER ROLE it NOINHERIT so only SET ROLE grants them")
	}
	_, err := h.pool.Exec(ctx, q)
	return err
}

func createTenantSchema(ctx context.Context, h *Shared, t Tenant) error {
	_, err := h.pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident(t.Schema)+` AUTHORIZATION `+ident(t.Role))
	if err != nil && !isCode(err, "42P06") && !isCode(err, "23505") { // made meanwhile
		return err
	}
	var owner string
	if err := h.pool.QueryRow(ctx, `SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = $1`, t.Schema).Scan(&owner); err != nil {
		return err
	}
	if owner != t.Role {
		return fmt.Errorf("schema %q exists and is owned by %q, not the tenant's role %q", t.Schema, owner, t.Role)
	}
	return nil
}

// migrateTenant applies the store's migrations in the tenant's schema as
// the tenant's role, through the tenant's own connections (see tenantConn):
// each migration runs in one transaction.
func migrateTenant(ctx context.Context, h *Shared, t Tenant) error {
	c, err := h.conns(t)
	if err != nil {
		return err
	}
	defer c.close()
	db, err := c.openMigrate()
	if err != nil {
		return err
	}
	return migrations.Up(db, migrations.Postgres)
}

func dropTenantSchema(ctx context.Context, h *Shared, t Tenant) error {
	var owner string
	err := h.pool.QueryRow(ctx, `SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = $1`, t.Schema).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if owner != t.Role {
		return fmt.Errorf("schema %q is owned by %q, not the tenant's role %q: not dropped", t.Schema, owner, t.Role)
	}
	return asRole(ctx, h, t.Role, `DROP SCHEMA IF EXISTS `+ident(t.Schema)+` CASCADE`)
}

// asRole runs stmt as role: dropping what a role owns needs its privileges,
// which a NOINHERIT host holds only after SET ROLE.
func asRole(ctx context.Context, h *Shared, role, stmt string) error {
	return pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+ident(role)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmt)
		return err
	})
}

// Fence takes away the tenant role's right to change its tables: from
// then on every store that writes as the role (another host's, serving
// the tenant beside this one) fails with PostgreSQL's "permission
// denied", while reads and exports go on. A host fences a tenant before
// it copies the tenant's data elsewhere (a move), so that no write lands
// in the old copy after the copy was read. Unfence (and Provision) give
// the right back.
func (h *Shared) Fence(ctx context.Context, t Tenant) error {
	if err := t.validate(); err != nil {
		return err
	}
	s, r := ident(t.Schema), ident(t.Role)
	return asRole(ctx, h, t.Role, `REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA `+s+` FROM `+r+
		`; REVOKE UPDATE ON ALL SEQUENCES IN SCHEMA `+s+` FROM `+r)
}

// Unfence gives the tenant role back every right on its tables and
// sequences (what Fence took).
func (h *Shared) Unfence(ctx context.Context, t Tenant) error {
	if err := t.validate(); err != nil {
		return err
	}
	return unfenceTenant(ctx, h, t)
}

func unfenceTenant(ctx context.Context, h *Shared, t Tenant) error {
	s, r := ident(t.Schema), ident(t.Role)
	return asRole(ctx, h, t.Role, `GRANT ALL ON ALL TABLES IN SCHEMA `+s+` TO `+r+`; GRANT ALL ON ALL SEQUENCES IN SCHEMA `+s+` TO `+r)
}

// dropTenantOwned drops what else the role owns in this database and
// revokes what was granted to it, so DROP ROLE finds no dependency.
func dropTenantOwned(ctx context.Context, h *Shared, t Tenant) error {
	exists, plain, err := roleState(ctx, h.pool, t.Role)
	if err != nil || !exists {
		return err
	}
	if !plain {
		return fmt.Errorf("role %q may log in or has attributes: not a tenant role, not dropped", t.Role)
	}
	err = asRole(ctx, h, t.Role, `DROP OWNED BY `+ident(t.Role))
	if isCode(err, "42704") { // undefined_object: dropped meanwhile
		return nil
	}
	return err
}

func dropTenantRole(ctx context.Context, h *Shared, t Tenant) error {
	exists, plain, err := roleState(ctx, h.pool, t.Role)
	if err != nil || !exists {
		return err
	}
	if !plain {
		return fmt.Errorf("role %q may log in or has attributes: not a tenant role, not dropped", t.Role)
	}
	_, err = h.pool.Exec(ctx, `DROP ROLE IF EXISTS `+ident(t.Role))
	if isCode(err, "2BP01") { // dependent_objects_still_exist: in another database
		h.log.Info().Str("role", t.Role).Msg("tenant role kept: it still owns objects in another database of the server")
		return nil
	}
	return err
}
