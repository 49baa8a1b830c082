package rpcerr

import (
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every tablestore error.
const Domain = "tablestore"

// Reasons carried in ErrorInfo.
const (
	ReasonEntityAlreadyExists   = "ENTITY_ALREADY_EXISTS"
	ReasonEntityNotFound        = "ENTITY_NOT_FOUND"
	ReasonConditionNotSatisfied = "CONDITION_NOT_SATISFIED"
	ReasonTableNotFound         = "TABLE_NOT_FOUND"
	ReasonTableAlreadyExists    = "TABLE_ALREADY_EXISTS"
	ReasonInvalidInput          = "INVALID_INPUT"
	ReasonInvalidName           = "INVALID_NAME"
	// ReasonTableBeingDeleted: a create of the name of a deleted table
	// whose ranges may still serve (master ErrTableBeingDeleted).
	ReasonTableBeingDeleted = "TABLE_BEING_DELETED"
	// ReasonNotLeader: the addressed server does not lead the range (or the
	// master group); metadata "leader" may name the leader's server id.
	ReasonNotLeader = "NOT_LEADER"
	// ReasonStaleRange: the request's generation or key is not served by
	// this range any more; the caller refreshes its map.
	ReasonStaleRange    = "STALE_RANGE"
	ReasonRangeNotFound = "RANGE_NOT_FOUND"
	ReasonServerBusy    = "SERVER_BUSY"
	ReasonUnavailable   = "UNAVAILABLE"
	ReasonFilterInvalid = "FILTER_INVALID"
	// ReasonInvalidEntity: an entity broke a limit only detectable where
	// the data is (a merge grew it too large); metadata "code" carries the
	// Azure error code edm.AzureError gave.
	ReasonInvalidEntity = "INVALID_ENTITY"
	// ReasonNotReady: a range change that every replica must apply (a
	// merge's freeze) was refused before it was proposed, because a
	// replica would not get it now; nothing changed, and a later try may
	// succeed. Not retried by the range client.
	ReasonNotReady = "NOT_READY"
	// ReasonMergeAborted: the master froze a merge's right range, a
	// replica did not apply the freeze within its bounded wait, and it
	// recorded the merge as aborted and unfroze the range (master
	// ErrMergeAborted). Nothing changed; a later request freezes anew.
	ReasonMergeAborted = "MERGE_ABORTED"
	// ReasonNoJoinFloor: the master could not take a join floor for a
	// replica a partition server is about to re-create (no leader of the
	// range confirmed itself, or the range changed meanwhile; gRPC
	// Aborted). A fact about the range, not the master: the master client
	// stays on this master, and the server asks again later.
	ReasonNoJoinFloor = "NO_JOIN_FLOOR"
	// ReasonGroupFull: an AddSpan was refused because the Raft group
	// already holds the request's max_spans spans (fsm.ErrGroupFull, gRPC
	// FailedPrecondition); nothing changed. The master places the table
	// elsewhere.
	ReasonGroupFull = "GROUP_FULL"
)

// Metadata keys.
const (
	// MetaIndex is the index of the failing operation of a batch.
	MetaIndex = "index"
	// MetaLeader is the server id of the current leader, when known.
	MetaLeader = "leader"
	// MetaRetryAfterMs suggests a retry delay.
	MetaRetryAfterMs = "retry_after_ms"
	// MetaAzureCode is the Azure error code of an INVALID_ENTITY error.
	MetaAzureCode = "code"
	// MetaSharedGroup, on a NOT_READY refusal of a deleted table's
	// freeze, is the Raft group (decimal id) that serves the range beside
	// another table's: the range leaves that group before it freezes.
	MetaSharedGroup = "shared_group"
)

// New returns a gRPC status error with an ErrorInfo.
func New(code codes.Code, reason, msg string, md map[string]string) error {
	st := status.New(code, msg)
	if withDetails, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: md}); err == nil {
		st = withDetails
	}
	return st.Err()
}

// WithIndex returns New with the batch operation index set.
func WithIndex(code codes.Code, reason, msg string, index int) error {
	return New(code, reason, msg, map[string]string{MetaIndex: strconv.Itoa(index)})
}

// Info is what a caller learns from an error.
type Info struct {
	Code     codes.Code
	Reason   string
	Message  string
	Metadata map[string]string
}

// Parse extracts the code, reason and metadata of err (which may wrap a gRPC
// status). A nil error gives codes.OK.
func Parse(err error) Info {
	if err == nil {
		return Info{Code: codes.OK}
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		st := status.FromContextError(err)
		return Info{Code: st.Code(), Message: err.Error()}
	}
	st := se.GRPCStatus()
	info := Info{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == Domain {
			info.Reason = ei.GetReason()
			info.Metadata = ei.GetMetadata()
		}
	}
	return info
}

// Index returns the batch operation index in the metadata, or -1.
func (i Info) Index() int {
	if v, ok := i.Metadata[MetaIndex]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return -1
}

// Is reports whether err carries reason.
func Is(err error, reason string) bool {
	return err != nil && Parse(err).Reason == reason
}
