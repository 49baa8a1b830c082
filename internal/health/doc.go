// Package health serves the liveness (/healthz) and readiness (/readyz)
// endpoints every role mounts beside /metrics. Each role decides readiness
// with its own pure function of gathered facts and returns a Verdict; this
// package only turns verdicts into HTTP answers.
package health
