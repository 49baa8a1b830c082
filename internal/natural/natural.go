// Package natural orders strings with embedded numbers by the numbers'
// values, so server ids sort ps1, ps2, ps10 wherever they are listed (ctl,
// the dashboard).
package natural

import (
	"cmp"
	"strings"
)

// Compare compares a and b as cmp.Compare does, except that runs of digits
// compare by value ("ps2" < "ps10"; "ps01" equals "ps1").
func Compare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitsPrefix(a), digitsPrefix(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := cmp.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitsPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
