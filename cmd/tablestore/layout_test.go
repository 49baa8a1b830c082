package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestInternalImportsNoRole keeps internal/ the ground floor: code shared by
// the roles, importing none of them (the composition root is cluster/).
func TestInternalImportsNoRole(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "tablestore/internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	roles := []string{"master", "partitionserver", "frontend", "ctl", "loadgen", "sim", "cluster", "chaos"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			for _, r := range roles {
				if imp == "tablestore/"+r || strings.HasPrefix(imp, "tablestore/"+r+"/") {
					t.Errorf("%s imports the role package %s", fields[0], imp)
				}
			}
		}
	}
}
