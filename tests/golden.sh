#!/bin/sh
# The golden check: runs every configuration of tests/golden/cases with --json --trace
# and compares the report (wall times removed) and the trace byte for byte with what
# was captured in tests/golden/expected/. A change that is not meant to alter numbers
# keeps them identical; one that is says so in its commit and re-captures them:
#
#   sh tests/golden.sh --capture      (PEMU=build/pemu by default)
#
# PEMU_GOLDEN_FILTER=substring runs only the cases whose name contains it.
# The reports hold the last bits of float math, which may depend on the GEMM kernel
# OpenBLAS picks for the host's CPU; the cases run on its baseline x86-64 kernels
# (Prescott: SSE3, on every x86-64 host, and what OpenBLAS 0.3.21 falls back to on CPUs
# it does not know), so that a host it knows better runs the same ones. (Here SkylakeX's
# kernels gave the same reports for every case tried.)
# Exit 0 when every case matches, 1 otherwise (each mismatch named).
set -u
here=$(dirname "$0")/golden
pemu=${PEMU:-build/pemu}
capture=0
[ "${1:-}" = "--capture" ] && capture=1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$here/expected"
pass=0; fail=0
# The report without what is the host's: "wall_s" and "wall_ns" fields hold host
# time, "devices_run" how many devices a folded dry-run simulated (the report is the
# same whether it folds or not, which these cases, captured unfolded, also check).
strip() { sed -e 's/"wall_s":[-+.eE0-9]*/"wall_s":0/g' -e 's/"wall_ns":[-+.eE0-9]*/"wall_ns":0/g' -e 's/,"devices_run":[0-9]*//g' "$1"; }
while read -r name args; do
	case "$name" in ''|'#'*) continue ;; esac
	if [ -n "${PEMU_GOLDEN_FILTER:-}" ]; then
		case "$name" in *"$PEMU_GOLDEN_FILTER"*) ;; *) continue ;; esac
	fi
	# shellcheck disable=SC2086
	OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=Prescott "$pemu" $args --json --trace-devices all --trace "$tmp/$name.trace.json" \
		>"$tmp/$name.out" 2>"$tmp/$name.err"
	rc=$?
	strip "$tmp/$name.out" >"$tmp/$name.json"
	echo "exit $rc" >>"$tmp/$name.json"
	if [ $capture = 1 ]; then
		cp "$tmp/$name.json" "$here/expected/$name.json"
		sha256sum <"$tmp/$name.trace.json" | cut -d' ' -f1 >"$here/expected/$name.trace.sha256"
		echo "golden: captured $name (exit $rc)"
		continue
	fi
	ok=1
	if ! cmp -s "$tmp/$name.json" "$here/expected/$name.json"; then
		echo "golden: $name: the report differs from tests/golden/expected/$name.json:"
		diff "$here/expected/$name.json" "$tmp/$name.json" | head -c 2000
		echo
		[ -s "$tmp/$name.err" ] && head -5 "$tmp/$name.err"
		ok=0
	fi
	want=$(cat "$here/expected/$name.trace.sha256" 2>/dev/null)
	got=$(sha256sum <"$tmp/$name.trace.json" | cut -d' ' -f1)
	if [ "$want" != "$got" ]; then
		echo "golden: $name: the trace differs (sha256 $got, captured $want)"
		ok=0
	fi
	if [ $ok = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done <"$here/cases"
[ $capture = 1 ] && exit 0
echo "golden: $pass configurations identical, $fail differ"
[ $fail -eq 0 ]
