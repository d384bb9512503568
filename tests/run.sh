#!/bin/sh
# Runs each cmocka test program given, prints its output, and closes with one line
# "tests: N passed, N failed" summed over all of them. Exits 1 if any failed or crashed.
passed=0; failed=0; crashed=""
t0=$(date +%s)
for t in "$@"; do
	out=$("$t" 2>&1); rc=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	passed=$((passed + p)); failed=$((failed + f))
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then crashed="$crashed $t(exit $rc)"; failed=$((failed + 1)); fi
done
[ -n "$crashed" ] && echo "crashed:$crashed"
echo "($(( $(date +%s) - t0 )) s)"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
