package cluster_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tablestore/cluster"
	"tablestore/frontend/auth"
	"tablestore/internal/logging"
)

// BenchmarkInsertPath drives signed Insert Entity requests through a real
// in-process cluster (front-end over HTTP, loopback gRPC to the range
// leader, Raft on three partition servers with fsync, bbolt) and reports
// the process CPU per insert, all roles and the client together:
//
//	go test ./cluster -run '^$' -bench InsertPath -benchtime 3000x -cpuprofile cpu.out
//
// The client side is a plain HTTP client with pre-signed requests, small
// next to the servers' share (see docs/performance.md for the profile).
func BenchmarkInsertPath(b *testing.B) {
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: b.TempDir(), Logger: logging.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	endpoint := c.Endpoint(0)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	do := func(method, path string, body []byte, want int) {
		r, _ := http.NewRequest(method, endpoint+path, bytes.NewReader(body))
		r.Header.Set("Accept", "application/json;odata=nometadata")
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("x-ms-version", "2019-02-02")
		r.Header.Set("Prefer", "return-no-content")
		if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
			b.Fatal(err)
		}
		resp, err := client.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	do("POST", "/Tables", []byte(`{"TableName":"bench"}`), http.StatusNoContent)
	pad := bytes.Repeat([]byte("x"), 900)
	var seq atomic.Int64
	insert := func() {
		i := seq.Add(1)
		body := fmt.Appendf(nil, `{"PartitionKey":"p%04d","RowKey":"r%09d","Name":"some name","Age":42,"Pad":"%s"}`, i%1024, i, pad)
		do("POST", "/bench", body, http.StatusNoContent)
	}
	for i := 0; i < 200; i++ { // warm up: leaders, connections
		insert()
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			insert()
		}
	})
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "inserts/s")
}
