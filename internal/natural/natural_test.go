package natural

import "testing"

func TestCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"ps2", "ps10", -1}, {"ps10", "ps2", 1}, {"ps1", "ps1", 0}, {"a", "b", -1},
		{"ps01", "ps1", 0}, {"ps", "ps1", -1}, {"x9y", "x10a", -1},
	}
	for _, tc := range tests {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
