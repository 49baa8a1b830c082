package master

import (
	"crypto/sha256"
	"strconv"
	"strings"

	pb "tablestore/proto/tablestorepb"
)

// A table request's id is the client's x-ms-client-request-id when it sent
// one, so that its retries are answered with the first outcome. But Azure
// records that header only for logging: a client may send one id for many
// requests (a job's correlation id), and a create, delete, create of one
// table under one id had its second create answered 201 from the first's
// record while no table was created (and a second delete 204 while the
// table stayed). A record now answers a request only while its outcome is
// still what the table's state says: a create's table is the table of that
// name, a delete's table is gone (a failure's cause is still there: the
// table for 409, no table for 404, the name's deleted table pending a
// freeze for 409 TableBeingDeleted). Otherwise the request is a new one,
// proposed under an id derived from the superseded record (reusedID), the
// same for every retry of it, so that its own retries are answered from its
// own record. The FSM's rule (a command with a recorded id replays the
// record) is unchanged: masters of either version apply the same log alike.
//
// What this gives up: a genuine retry under the client's id whose table
// another client changed after the first attempt (a delete answered, lost,
// then someone created the table again) runs again and deletes the new
// table, as it would against Azure, which keeps no records. An id the
// front-end made (the client sent none) names one request: its record
// always answers.

// maxReuseChain bounds the derived ids followed for one request.
const maxReuseChain = 64

// requestToApply returns the id a table command with request id id is
// proposed under, and the record that answers it instead, if one does.
// client says the id is the client's: one the front-end made for a single
// request (or none) is answered by its record whatever happened since.
func (st *state) requestToApply(id []byte, client bool, kind pb.MasterCommandKind, name string) ([]byte, *pb.TableRequestRecord) {
	if !client {
		r, _ := st.request(id, kind, name)
		return id, r
	}
	if len(id) == 0 {
		return id, nil
	}
	key := strings.ToLower(name)
	r, ok := st.request(id, kind, name)
	if !ok {
		return id, nil
	}
	// The latest request under this id is at the end of the chain of
	// derived ids: a record further on answers a retry, whatever the
	// state says of the records before it.
	for range maxReuseChain {
		next := reusedID(id, r)
		nr, ok := st.request(next, kind, name)
		if !ok {
			if st.superseded(key, r) {
				return next, nil
			}
			return id, r
		}
		id, r = next, nr
	}
	return id, r
}

// superseded reports whether record r's outcome no longer matches the
// state of its table (key): a request with its id is then a new one.
func (st *state) superseded(key string, r *pb.TableRequestRecord) bool {
	cur, exists := st.tables[key]
	switch {
	case r.GetKind() == pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE && r.GetError() == "":
		return !exists || cur.GetTableId() != r.GetTable().GetTableId()
	case r.GetKind() == pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE && r.GetError() == recordBeingDeleted:
		// 409 TableBeingDeleted: the deleted table's freeze confirmed
		// (or the name taken since, by an older build's create).
		return exists || !st.deletePendingName(key, 0)
	case r.GetKind() == pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE:
		return !exists // 409: the table is gone
	case r.GetError() == "":
		return exists // deleted: a table of that name is back
	default:
		return exists // 404: a table of that name is there now
	}
}

// reusedID is the id of the request that reuses id after its record r was
// superseded: fixed length (a long-reused id does not grow), distinct per
// superseded outcome (the table it created or deleted).
func reusedID(id []byte, r *pb.TableRequestRecord) []byte {
	h := sha256.New()
	h.Write([]byte("tablestore reused request id\x00"))
	h.Write(id)
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(r.GetTable().GetTableId(), 10) + "/" + r.GetError()))
	return h.Sum(nil)[:16]
}
