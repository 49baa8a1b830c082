package grouptransport

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The benchmarks compare this transport with what it replaced, one
// raft.NetworkTransport per group, on three in-process servers over
// loopback TCP with in-memory Raft stores (so the transport's CPU is what
// differs): `go test -run XXX -bench . ./partitionserver/grouptransport`.

type benchCluster struct {
	rafts  [][]*raft.Raft // [group][server]
	closes []func()
	conns  func() int
}

func (c *benchCluster) close() {
	for _, g := range c.rafts {
		for _, r := range g {
			r.Shutdown().Error()
		}
	}
	for _, f := range c.closes {
		f()
	}
}

func benchConfig(id string) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(id)
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
	c.LogOutput = io.Discard
	c.SnapshotThreshold = 1 << 30
	c.SnapshotInterval = time.Hour
	return c
}

func startBenchCluster(b *testing.B, shared bool, groups int) *benchCluster {
	c := &benchCluster{}
	const servers = 3
	var trs []*Transport
	var netTrs []*raft.NetworkTransport
	if shared {
		for range servers {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			tr := New(Config{Listener: ln})
			trs = append(trs, tr)
			c.closes = append(c.closes, func() { tr.Close() })
		}
		c.conns = func() int {
			n := 0
			for _, tr := range trs {
				d, a := tr.Conns()
				n += d + a
			}
			return n
		}
	}
	for g := range groups {
		transports := make([]raft.Transport, servers)
		var conf raft.Configuration
		for s := range servers {
			if shared {
				gt, err := trs[s].Group(uint64(g+1), nil)
				if err != nil {
					b.Fatal(err)
				}
				transports[s] = gt
			} else {
				nt, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				netTrs = append(netTrs, nt)
				transports[s] = nt
			}
			conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(fmt.Sprint("s", s)), Address: transports[s].LocalAddr()})
		}
		var members []*raft.Raft
		for s := range servers {
			cfg := benchConfig(fmt.Sprint("s", s))
			store := raft.NewInmemStore()
			snaps := raft.NewInmemSnapshotStore()
			if err := raft.BootstrapCluster(cfg, store, store, snaps, transports[s], conf); err != nil {
				b.Fatal(err)
			}
			r, err := raft.NewRaft(cfg, &listFSM{}, store, store, snaps, transports[s])
			if err != nil {
				b.Fatal(err)
			}
			members = append(members, r)
		}
		c.rafts = append(c.rafts, members)
	}
	if !shared {
		c.conns = func() int {
			// Each NetworkTransport pools up to 3 connections per peer
			// (outgoing); count open sockets of the process instead.
			return countSockets()
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, g := range c.rafts {
		for leader(g) == nil {
			if time.Now().After(deadline) {
				b.Fatal("no leaders")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return c
}

func leader(g []*raft.Raft) *raft.Raft {
	for _, r := range g {
		if r.State() == raft.Leader {
			return r
		}
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func countSockets() int {
	n := 0
	entries, _ := readDirNames("/proc/self/fd")
	for _, e := range entries {
		if l, err := readlink("/proc/self/fd/" + e); err == nil && len(l) > 7 && l[:7] == "socket:" {
			n++
		}
	}
	return n
}

// BenchmarkIdleGroups: CPU of 3 servers hosting idle groups (heartbeats
// only), per group, and the sockets they hold.
func BenchmarkIdleGroups(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "per-group-NetworkTransport", true: "grouptransport"}[shared]
		b.Run(name, func(b *testing.B) {
			const groups = 40
			c := startBenchCluster(b, shared, groups)
			defer c.close()
			time.Sleep(2 * time.Second)
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuTime()
			time.Sleep(5 * time.Second)
			cpu := cpuTime() - cpu0
			wall := time.Since(start)
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%core")
			b.ReportMetric(float64(c.conns()), "sockets")
		})
	}
}

// BenchmarkReplicate: entries applied through many groups at once; CPU per
// committed entry.
func BenchmarkReplicate(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "per-group-NetworkTransport", true: "grouptransport"}[shared]
		b.Run(name, func(b *testing.B) {
			const groups, workers = 50, 64
			c := startBenchCluster(b, shared, groups)
			defer c.close()
			data := make([]byte, 1024)
			var done, failed atomic.Int64
			b.ResetTimer()
			cpu0 := cpuTime()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for done.Load() < int64(b.N) {
						l := leader(c.rafts[w%groups])
						if l == nil {
							time.Sleep(time.Millisecond)
							continue
						}
						if l.Apply(data, 5*time.Second).Error() != nil {
							failed.Add(1)
							continue
						}
						done.Add(1)
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(failed.Load()), "failed-applies")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(done.Load()), "cpu-us/op")
		})
	}
}
