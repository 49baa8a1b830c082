package masterclient

import (
	"context"
	"errors"
	"io"

	pb "tablestore/proto/tablestorepb"
)

// ReadEvents reads the whole event log m keeps (its Events stream to the
// end). A stream cut short is an error, not the log: callers retry it
// whole (Client.Call).
func ReadEvents(ctx context.Context, m pb.MasterServiceClient) ([]*pb.Event, error) {
	st, err := m.Events(ctx, &pb.EventsRequest{})
	if err != nil {
		return nil, err
	}
	var out []*pb.Event
	for {
		e, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
}
