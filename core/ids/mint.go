package ids

import (
	"crypto/rand"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// entropy is monotonic crypto/rand entropy shared by every kind, so that
// identifiers minted by one process are strictly increasing even inside the
// same millisecond; ulid.Monotonic is not safe for concurrent use, so it is
// guarded by mu.
var (
	mu      sync.Mutex
	entropy = ulid.Monotonic(rand.Reader, 0) // guarded by mu
)

// newULID returns a new 26-character ULID with the current time in
// milliseconds. crypto/rand never fails, and a monotonic overflow needs 2^80
// identifiers within one millisecond, so MustNew cannot panic in practice.
func newULID() string {
	mu.Lock()
	defer mu.Unlock()
	return ulid.MustNew(ulid.Timestamp(time.Now()), entropy).String()
}

// NewEpoch mints an execution epoch ID (a ULID). Only the supervisor calls
// it, when it launches a server.
func NewEpoch() EpochID { return EpochID(newULID()) }

// NewRun mints an agent run ID (a ULID), when a shim connects.
func NewRun() RunID { return RunID(newULID()) }

// NewCall mints the ID of one tools/call in the audit log (a ULID).
func NewCall() CallID { return CallID(newULID()) }

// NewRequest mints an approval request ID: "apr_" and a ULID.
func NewRequest() RequestID { return RequestID("apr_" + newULID()) }

// NewGrant mints a grant ID: "grt_" and a ULID.
func NewGrant() GrantID { return GrantID("grt_" + newULID()) }
