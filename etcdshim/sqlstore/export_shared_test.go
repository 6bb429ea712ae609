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
