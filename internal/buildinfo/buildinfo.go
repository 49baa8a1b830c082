// Package buildinfo describes the running binary from the build
// information Go embeds: `tablestore version` prints it, every role's
// metrics listener serves it at /version, and `tablestore ctl debug zip`
// records ctl's own and each process's.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Line is "tablestore VERSION commit REV[+dirty] (TIME) GOVERSION" (the
// commit needs a build inside a git checkout, as `make build` does).
func Line() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "tablestore unknown (no build information)"
	}
	return line(bi)
}

// line formats bi. Pure.
func line(bi *debug.BuildInfo) string {
	set := map[string]string{}
	for _, kv := range bi.Settings {
		set[kv.Key] = kv.Value
	}
	commit := set["vcs.revision"]
	if commit == "" {
		commit = "unknown"
	}
	if set["vcs.modified"] == "true" {
		commit += "+dirty"
	}
	out := fmt.Sprintf("tablestore %s commit %s", bi.Main.Version, commit)
	if t := set["vcs.time"]; t != "" {
		out += " (" + t + ")"
	}
	return out + " " + bi.GoVersion
}
