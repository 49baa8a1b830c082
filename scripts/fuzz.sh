#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each
# (default 60s), one after the other, and fails if any of them finds a
# crash. Targets are discovered, so new ones are picked up:
# every "func FuzzX(f *testing.F)" in a *_test.go file.
#
#   ./scripts/fuzz.sh 60s        (what `make fuzz` runs)
#   ./scripts/fuzz.sh 10s ./frontend/...   (only targets under a path)
#
# A crasher is written by `go test` to <package>/testdata/fuzz/<FuzzX>/;
# review it and commit it as a regression seed once fixed.
set -euo pipefail

fuzztime="${1:-60s}"
scope="${2:-.}"
scope="${scope%/...}"

cd "$(dirname "$0")/.."

# "dir<TAB>FuzzName" for every target, sorted for a stable order.
targets=$(grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]+\(' "$scope" \
	| sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)\($#\1\t\2#' \
	| sort -u)

if [ -z "$targets" ]; then
	echo "fuzz.sh: no fuzz targets found under $scope" >&2
	exit 1
fi

failed=()
while IFS=$'\t' read -r dir name; do
	pkg="./${dir#./}"
	echo "=== $pkg $name ($fuzztime)"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"; then
		failed+=("$pkg $name")
	fi
done <<< "$targets"

if [ "${#failed[@]}" -gt 0 ]; then
	echo "fuzz.sh: findings in:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz.sh: $(wc -l <<< "$targets") targets, no findings"
