package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"no vcs", debug.BuildInfo{GoVersion: "go1.24", Main: debug.Module{Version: "(devel)"}},
			"tablestore (devel) commit unknown go1.24"},
		{"dirty checkout", debug.BuildInfo{GoVersion: "go1.24", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-28T00:00:00Z"}}},
			"tablestore v1.2.3 commit abc+dirty (2026-11-28T00:00:00Z) go1.24"},
	} {
		if got := line(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
