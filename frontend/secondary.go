package frontend

import (
	"context"
	"time"

	"tablestore/internal/edm"
)

// Reads on the read-access secondary endpoint go to range followers when
// the backend can do that (SecondaryReader); otherwise, as with a backend
// that has no followers, they are the primary's reads.

func (s *Server) get(ctx context.Context, rc *reqCtx, table, pk, rk string) (*edm.Entity, error) {
	if sr, ok := s.backend.(SecondaryReader); ok && rc.secondary {
		return sr.SecondaryGet(ctx, s.tableID(rc.account, table), pk, rk)
	}
	return s.backend.Get(ctx, s.tableID(rc.account, table), pk, rk)
}

func (s *Server) query(ctx context.Context, rc *reqCtx, table string, q Query) (*Page, error) {
	if sr, ok := s.backend.(SecondaryReader); ok && rc.secondary {
		return sr.SecondaryQuery(ctx, s.tableID(rc.account, table), q)
	}
	return s.backend.Query(ctx, s.tableID(rc.account, table), q)
}

// lastSyncTime is the secondary's LastSyncTime: the followers' when the
// backend reports it, else now (a backend without followers is its own
// secondary). ok is false when a follower cannot tell how current it is.
func (s *Server) lastSyncTime(ctx context.Context) (t time.Time, ok bool, err error) {
	sr, isSR := s.backend.(SecondaryReader)
	if !isSR {
		return time.Now().UTC(), true, nil
	}
	t, err = sr.SecondarySync(ctx)
	return t, !t.IsZero(), err
}
