package master

import "tablestore/master/scheduler"

// schedConfig is the scheduler's configuration: the policy thresholds,
// with the cap on an anchor group's spans (--table-group-spans) for
// detach-over-cap (master/scheduler/detach_overcap.go), which takes the
// newest spans out of an anchor group serving more: a group filled
// before the group's apply checked the cap, or one a create's uncapped
// add passed it in when its master died (or its detach failed) before
// leaveFullGroup's detach. The rule runs with or without --table-groups:
// an anchor group outlives the flag until ctl ungroup-tables.
func (s *Server) schedConfig() scheduler.Config {
	c := s.cfg.Policy.Config
	c.AnchorGroupSpans = s.cfg.TableGroupSpans
	// Tables join shared groups only under --table-groups: attach-cold
	// takes a cold table's own group into one (stage 8) then alone.
	c.AttachCold = s.cfg.TableGroups
	return c
}
