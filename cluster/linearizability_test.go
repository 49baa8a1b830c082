package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/anishathalye/porcupine"

	"tablestore/cluster/clustertest"
	pb "tablestore/proto/tablestorepb"
)

// registerInput is one operation on a key: a read (put false) or a write
// of value.
type registerInput struct {
	key   string
	put   bool
	value int
}

// registerOutput is what a read saw (-1: no entity).
type registerOutput struct {
	value int
}

// registerModel is a set of registers, one per key, starting empty (-1):
// the model a linearizable store must be indistinguishable from.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(registerInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return -1 },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(registerInput)
		if in.put {
			return true, in.value
		}
		return output.(registerOutput).value == state.(int), state
	},
	Equal: func(a, b interface{}) bool { return a == b },
	DescribeOperation: func(input, output interface{}) string {
		in := input.(registerInput)
		if in.put {
			return fmt.Sprintf("put(%s, %d)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %d", in.key, output.(registerOutput).value)
	},
}

// registerHistory runs six clients reading and writing keys (each its own
// PartitionKey) through tc until disrupt returns, and returns the history.
// A write whose outcome the client did not learn (an error after retries)
// may or may not have happened: it is kept with no end time.
func registerHistory(t *testing.T, tc *aztables.Client, keys []string, disrupt func()) []porcupine.Operation {
	t.Helper()
	ctx := clustertest.Context(t, 2*time.Minute)
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for client := 0; client < 6; client++ {
		wg.Add(1)
		go func(client int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[(client+i)%len(keys)]
				if (client+i)%2 == 0 {
					v := client*1_000_000 + i
					call := now()
					body, _ := json.Marshal(map[string]any{"PartitionKey": key, "RowKey": "r", "V": v})
					_, err := tc.UpsertEntity(ctx, body, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
					ret := now()
					if err != nil {
						ret = math.MaxInt64 // outcome unknown: may take effect any time after the call
					}
					record(porcupine.Operation{ClientId: client, Input: registerInput{key: key, put: true, value: v}, Call: call, Output: registerOutput{}, Return: ret})
					continue
				}
				call := now()
				resp, err := tc.GetEntity(ctx, key, "r", nil)
				ret := now()
				out := registerOutput{value: -1}
				switch {
				case err == nil:
					var e struct{ V int }
					if json.Unmarshal(resp.Value, &e) != nil {
						t.Errorf("bad entity %s", resp.Value)
						continue
					}
					out.value = e.V
				case clustertest.IsStatus(err, http.StatusNotFound):
				default:
					continue // a failed read tells nothing
				}
				record(porcupine.Operation{ClientId: client, Input: registerInput{key: key}, Call: call, Output: out, Return: ret})
			}
		}(client)
	}
	disrupt()
	close(stop)
	wg.Wait()
	return history
}

func checkLinearizable(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	t.Logf("%d operations recorded", len(history))
	switch res := porcupine.CheckOperationsTimeout(registerModel, history, 60*time.Second); res {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Fatal("history is not linearizable")
	default:
		t.Fatalf("linearizability check did not finish: %v", res)
	}
}

// TestLinearizableUnderLeaderFailure: the range leader is killed and
// restarted while clients read and write.
func TestLinearizableUnderLeaderFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	const table = "linear"
	if _, err := sc.CreateTable(clustertest.Context(t, time.Minute), table, nil); err != nil {
		t.Fatal(err)
	}
	history := registerHistory(t, sc.NewClient(table), []string{"k0", "k1", "k2"}, func() {
		time.Sleep(time.Second)
		clustertest.WaitFor(t, 10*time.Second, "a reported range leader", func() bool { return clustertest.RangeLeader(c, table) >= 0 })
		leader := clustertest.RangeLeader(c, table)
		if err := c.StopServer(leader); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if err := c.RestartServer(leader); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
	})
	checkLinearizable(t, history)
}

// TestLinearizableAcrossSplitAndMerge: the keys' range is split (keys end
// up on both sides) and merged back while clients read and write.
func TestLinearizableAcrossSplitAndMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	clustertest.BesideOneOther(t)
	c := clustertest.StartTuned(t, 3, clustertest.QuietPolicies, nil)
	sc := clustertest.ServiceClient(t, c, 0)
	ctx := clustertest.Context(t, 2*time.Minute)
	const table = "linearsplit"
	if _, err := sc.CreateTable(ctx, table, nil); err != nil {
		t.Fatal(err)
	}
	mc := clustertest.MasterClient(t, c)
	history := registerHistory(t, sc.NewClient(table), []string{"k0", "k1", "k2", "k3"}, func() {
		time.Sleep(time.Second)
		var split *pb.SplitResponse
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			split, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: "k2"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		_, err = clustertest.MergeRetrying(ctx, t, mc, split.GetLeft().GetRangeId())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	})
	checkLinearizable(t, history)
}
