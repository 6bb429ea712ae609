package sqlstore

import "context"

// ProvisionSteps and DropSteps count the steps of Provision and Drop.
func ProvisionSteps() int { return len(provisionSteps()) }

// DropSteps counts the steps of Drop.
func DropSteps() int { return len(dropSteps()) }

// ProvisionUpTo runs the first n steps of Provision: a crash after them.
func (h *Shared) ProvisionUpTo(ctx context.Context, t Tenant, n int) error {
	return h.provisionUpTo(ctx, t, n)
}

// DropUpTo runs the first n steps of Drop: a crash after them.
func (h *Shared) DropUpTo(ctx context.Context, t Tenant, n int) error {
	return h.dropUpTo(ctx, t, n)
}

// QueryRowForTest reads one row on one of the pool's connections, as
// the pool hands it out.
func (h *Shared) QueryRowForTest(ctx context.Context, q string, dest ...any) error {
	return h.pool.QueryRow(ctx, q).Scan(dest...)
}

// SetPipelineAutoCommit switches how a shared store sends a statement
// outside a transaction, and returns the previous setting.
func SetPipelineAutoCommit(on bool) bool {
	old := pipelineAutoCommit
	pipelineAutoCommit = on
	return old
}

// QueryRowForTest reads one row through the store's pool, outside a
// transaction (inTx false) or in a read transaction.
func (s *Store) QueryRowForTest(ctx context.Context, inTx bool, q string, dest ...any) error {
	if !inTx {
		return s.c.read.QueryRowContext(ctx, q).Scan(dest...)
	}
	tx, err := s.c.read.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	return tx.QueryRowContext(ctx, q).Scan(dest...)
}
