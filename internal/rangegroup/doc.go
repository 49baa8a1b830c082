// Package rangegroup names the Raft group that serves a range
// (docs/range-groups.md): a range is a span of one group, and a
// descriptor whose group_id is 0 is its own group's only span, named by
// its range id. Every existing range reads that way, so nothing stored
// before groups had ids needs migrating.
package rangegroup
