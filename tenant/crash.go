package tenant

import (
	"os"
	"syscall"
	"time"
)

// CrashEnv, set to "STEP/TENANT" in a host's environment, makes the host
// kill its own process with SIGKILL when its work on tenant TENANT
// reaches STEP, one of the Crash* steps: a crash at a known point, for
// tests of what a host started again makes of it. Unset (always, outside
// tests), crash points do nothing.
const CrashEnv = "SQLKUBE_TEST_CRASH_AT"

// The steps of a tenant's create and delete a host can be crashed at
// (CrashEnv), in the order it reaches them.
const (
	// Create.
	CrashAfterFinalizer = "after-finalizer"         // the Tenant holds the host's finalizer
	CrashAfterToken     = "after-token"             // NAME-token made
	CrashAfterPort      = "after-port"              // status: port, endpoint, datastore; Pending
	CrashAfterDatastore = "after-datastore"         // PostgreSQL: the schema and role made; SQLite: its directory
	CrashAfterIdentity  = "after-identity"          // the tenant's identity and PKI are in its datastore, nothing serves yet
	CrashAfterStart     = "after-start"             // its API serves; no kubeconfig Secret yet
	CrashAfterSecret    = "after-kubeconfig-secret" // its admin kubeconfig Secret written, status not yet Ready
	// Delete.
	CrashAfterDeleting    = "after-deleting"       // status: Deleting
	CrashAfterStop        = "after-stop"           // its control plane stopped
	CrashAfterDropData    = "after-drop-datastore" // PostgreSQL: its schema and role dropped
	CrashAfterRemoveFiles = "after-remove-files"   // DATA_DIR/tenants/NAME removed (on SQLite, its data)
	CrashBeforeFinalizer  = "before-finalizer"     // its Secrets deleted, the finalizer still there
)

// CreateCrashSteps and DeleteCrashSteps are the crash points of a create
// and of a delete, in order.
var (
	CreateCrashSteps = []string{CrashAfterFinalizer, CrashAfterToken, CrashAfterPort, CrashAfterDatastore, CrashAfterIdentity, CrashAfterStart, CrashAfterSecret}
	DeleteCrashSteps = []string{CrashAfterDeleting, CrashAfterStop, CrashAfterDropData, CrashAfterRemoveFiles, CrashBeforeFinalizer}
)

// crashAt is CrashEnv, read once.
var crashAt = os.Getenv(CrashEnv)

// crashPoint kills the process, as a crash would, if CrashEnv names step
// of tenant name.
func crashPoint(step, name string) {
	if crashAt == "" || crashAt != step+"/"+name {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	for { // SIGKILL cannot be caught: this never ends
		time.Sleep(time.Hour)
	}
}

// StaleStandbyEnv, set to "1" in a host's environment, makes the host,
// while it stands by (standby), go on serving a tenant it serves
// whatever the leading host does to it: a standby that has not seen the
// change yet (cut off from the host API, say), for tests of the fence
// that keeps such a host's writes out of a tenant's moved data.
const StaleStandbyEnv = "SQLKUBE_TEST_STALE_STANDBY"

// staleStandby is StaleStandbyEnv, read once.
var staleStandby = os.Getenv(StaleStandbyEnv) == "1"
