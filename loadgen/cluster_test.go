package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/cluster"
	"tablestore/internal/logging"
)

// TestRunAgainstCluster drives a real in-process cluster through the SDK:
// the report is well formed, nothing fails, the rate limit holds, and every
// insert the report counts is in the table.
func TestRunAgainstCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c, err := cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: t.TempDir(), Logger: logging.FromEnv("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	tests := []struct {
		name     string
		table    string
		scenario string
		duration time.Duration
		rate     float64
		reads    float64
		workers  int
	}{
		{"uniform with reads", "lguniform", ScenarioUniform, 2 * time.Second, 0, 0.3, 4},
		// Enough workers that the cluster's capacity (even under -race) is
		// well above the rate: what is measured is the limiter.
		{"append at a fixed rate", "lgappend", ScenarioAppend, time.Second, 200, 0, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Conn = c.ConnectionString(0)
			cfg.Table, cfg.Scenario, cfg.Duration, cfg.Rate, cfg.ReadRatio = tc.table, tc.scenario, tc.duration, tc.rate, tc.reads
			cfg.Workers, cfg.Partitions, cfg.EntitySize, cfg.JSON = tc.workers, 20, 256, true
			var out bytes.Buffer
			start := time.Now()
			s, err := Generate(context.Background(), cfg, &out)
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > tc.duration+5*time.Second {
				t.Errorf("run of %v took %v", tc.duration, el)
			}

			// start, one interval a second (the last may be partial), summary.
			var types []string
			dec := json.NewDecoder(&out)
			var last Summary
			for dec.More() {
				var m map[string]any
				if err := dec.Decode(&m); err != nil {
					t.Fatal(err)
				}
				types = append(types, m["type"].(string))
				if m["type"] == "summary" {
					b, _ := json.Marshal(m)
					json.Unmarshal(b, &last)
				}
			}
			joined := strings.Join(types, ",")
			if !strings.HasPrefix(joined, "start,interval") || !strings.HasSuffix(joined, ",summary") {
				t.Errorf("line types %s", joined)
			}
			if last.OK != s.OK || s.Writes == 0 || s.Errors != 0 || s.Interrupted {
				t.Errorf("summary %+v (printed %+v)", s, last)
			}
			if tc.reads > 0 && s.Reads == 0 {
				t.Errorf("no reads at --read-ratio %v", tc.reads)
			}
			if tc.rate > 0 {
				// Never above the target; the lower bound only catches a
				// gross under-delivery (a loaded CI machine may be slow,
				// and TestLimiterWaitShared measures the pacing itself).
				if got := float64(s.OK) / s.DurationSeconds; got > tc.rate*1.15 || got < tc.rate*0.3 {
					t.Errorf("%.0f entities/s at --rate %v", got, tc.rate)
				}
			}

			// Every counted insert is stored; at most one in-flight insert
			// per worker was cut off by the end of the run and may be
			// stored uncounted.
			sc, err := aztables.NewServiceClientFromConnectionString(c.ConnectionString(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			pager := sc.NewClient(tc.table).NewListEntitiesPager(&aztables.ListEntitiesOptions{Select: to.Ptr("PartitionKey,RowKey")})
			stored := 0
			var prevPK string
			for pager.More() {
				page, err := pager.NextPage(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				stored += len(page.Entities)
				if tc.scenario == ScenarioAppend && len(page.Entities) > 0 {
					var e struct{ PartitionKey string }
					json.Unmarshal(page.Entities[len(page.Entities)-1], &e)
					prevPK = e.PartitionKey
				}
			}
			if int64(stored) < s.Writes || int64(stored) > s.Writes+int64(cfg.Workers) {
				t.Errorf("%d entities stored, %d inserts counted", stored, s.Writes)
			}
			if tc.scenario == ScenarioAppend && len(prevPK) != appendKeyDigits {
				t.Errorf("append keys look like %q", prevPK)
			}
		})
	}
}
