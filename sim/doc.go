// Package sim runs the master's real scheduler (package master/scheduler)
// against a simulated cluster: servers with a capacity, ranges over a key
// space, a workload model (uniform, hot-partition, append, zipf, diurnal)
// and faults (a server fails, a server is added), in simulated time. Each
// simulated step turns the workload into per-range load reports, runs the
// scheduler like the master's policy loop does, and carries out the
// operations it plans after a simulated duration. The result is a Report
// (JSON, and HTML with inline SVG plots) of throughput served against
// offered, the spread of load over servers, operations per minute and the
// time to absorb a hot spot. pd-simulator (tikv/pd) is the model.
package sim
