package chaos

import "testing"

// TestTableGroupsFlag checks that the chaos run's idea of the masters'
// --table-groups follows the flags it passes them, and the master's
// default (on) when none is passed.
func TestTableGroupsFlag(t *testing.T) {
	for _, tc := range []struct {
		flags string
		want  bool
	}{
		{"", true},
		{"--quiesce-after=2s", true},
		{"--table-groups", true},
		{"-table-groups", true},
		{"--table-groups=true", true},
		{"--table-groups=false", false},
		{"-table-groups=false", false},
		{"--table-groups=false --table-groups", true},
		{"--table-groups --table-groups=false", false},
		{"--table-group-spans=8", true},
		{"--table-group-spans=8 --table-groups=false", false},
	} {
		t.Run(tc.flags, func(t *testing.T) {
			t.Setenv("TABLESTORE_CHAOS_MASTER_FLAGS", tc.flags)
			if got := tableGroups(); got != tc.want {
				t.Errorf("tableGroups() with %q = %v, want %v", tc.flags, got, tc.want)
			}
		})
	}
}
