package tablestorepb

import "strings"

// Name is the kind's name where people read it (ctl's events, the
// dashboard): EVENT_KIND_LEADER_TRANSFER is "leader-transfer". A number no
// name is known for (an event of a newer master) is its String.
func (k EventKind) Name() string {
	name, ok := EventKind_name[int32(k)]
	if !ok {
		return k.String()
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "EVENT_KIND_")), "_", "-")
}
