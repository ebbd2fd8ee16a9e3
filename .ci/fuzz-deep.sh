#!/usr/bin/env bash
# Runs the repository's fuzz targets, each for EXECS executions or CAP
# seconds, whichever comes first, and prints a line per target: package,
# target, executions, seconds, executions per second, result.
#   .ci/fuzz-deep.sh [EXECS [CAP [PARALLEL [REGEXP]]]]
# Defaults: 10000000 executions, 3600 s, 2 workers, every target; REGEXP
# selects targets by name (grep -E), a leading ! excludes them instead.
# docs/fuzzing.md records the figures of its last run.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
execs=${1:-10000000}
cap=${2:-3600}
par=${3:-2}
sel=${4:-.}
logs=$(mktemp -d /tmp/fuzz-deep.XXXXXX)
printf '%-24s %-22s %11s %6s %8s %s\n' package target execs secs execs/s result
for f in $(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do
	pkg=./$(dirname "${f#./}")
	for t in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
		case $sel in
		!*) echo "$t" | grep -qE "${sel#!}" && continue ;;
		*) echo "$t" | grep -qE "$sel" || continue ;;
		esac
		log=$logs/$(echo "${pkg#./}" | tr / _)_$t.log
		# SIGINT ends a fuzz run cleanly, with its final figures.
		timeout -s INT "$cap" go test -run '^$' -fuzz "^$t\$" -fuzztime "${execs}x" \
			-parallel "$par" "$pkg" >"$log" 2>&1
		rc=$?
		# "fuzz: elapsed: 1h2m3s, execs: N (R/sec), ..."
		last=$(grep -oE 'elapsed: [0-9hms]+, execs: [0-9]+' "$log" | tail -1)
		secs=$(echo "$last" | sed -E 's/elapsed: ([0-9hms]+),.*/\1/' |
			awk '{ t = 0; n = ""; for (i = 1; i <= length($0); i++) { c = substr($0, i, 1);
				if (c ~ /[0-9]/) n = n c; else { t += n * (c == "h" ? 3600 : c == "m" ? 60 : 1); n = "" } }
				print t }')
		n=$(echo "$last" | sed -E 's/.*execs: ([0-9]+)/\1/')
		result=ok
		if grep -q -- '--- FAIL' "$log"; then
			result="FAIL: $log"
		elif { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; } || [ -z "$last" ]; then
			# (124: timeout ended a run at CAP, which is a normal end.)
			result="error $rc: $log"
		fi
		rate=0
		if [ -n "$secs" ] && [ "$secs" -gt 0 ]; then
			rate=$((n / secs))
		fi
		printf '%-24s %-22s %11s %6s %8s %s\n' "${pkg#./}" "$t" "${n:-0}" "${secs:-0}" "$rate" "$result"
	done
done
