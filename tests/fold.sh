#!/bin/sh
# Dry-run folding is exact: every configuration of tests/fold/cases runs with --fold on
# and --fold off (--dry-run --json --trace); the reports (without wall time and the
# count of devices simulated) and the traces must be byte for byte the same, and the
# folded run must have simulated the number of devices the case names, so that a plan
# that folds too little, too much or where the hardware is not symmetric fails.
#
# PEMU_FOLD_FILTER=a,b runs only the cases whose name contains a or b.
# Exit 0 when every case holds, 1 otherwise (each failure named).
set -u
here=$(dirname "$0")/fold
pemu=${PEMU:-build/pemu}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
strip() { sed -e 's/"wall_s":[-+.eE0-9]*/"wall_s":0/g' -e 's/,"devices_run":[0-9]*//g' "$1"; }
selected() {
	[ -z "${PEMU_FOLD_FILTER:-}" ] && return 0
	for f in $(echo "$PEMU_FOLD_FILTER" | tr ',' ' '); do
		case "$1" in *"$f"*) return 0 ;; esac
	done
	return 1
}
while read -r name want args; do
	case "$name" in ''|'#'*) continue ;; esac
	selected "$name" || continue
	ok=1
	for fold in on off; do
		# shellcheck disable=SC2086
		"$pemu" $args --dry-run --fold $fold --json --trace-devices all --trace "$tmp/$fold.trace" \
			>"$tmp/$fold.out" 2>"$tmp/$fold.err"
		echo "exit $?" >>"$tmp/$fold.out"
		strip "$tmp/$fold.out" >"$tmp/$fold.json"
	done
	got=$(sed -n 's/.*"devices_run":\([0-9]*\).*/\1/p' "$tmp/on.out")
	if [ "$got" != "$want" ]; then
		echo "fold: $name: simulated ${got:-?} devices, the plan should run $want"
		head -3 "$tmp/on.err"
		ok=0
	fi
	if ! cmp -s "$tmp/on.json" "$tmp/off.json"; then
		echo "fold: $name: the folded report differs from the unfolded one:"
		diff "$tmp/off.json" "$tmp/on.json" | head -c 2000
		echo
		ok=0
	fi
	if ! cmp -s "$tmp/on.trace" "$tmp/off.trace"; then
		echo "fold: $name: the folded trace differs from the unfolded one"
		ok=0
	fi
	if [ $ok = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done <"$here/cases"

# pemu coll folds too (the ranks of a collective without a root onto rank 0; with a
# root, onto the root, its chain's end and one other): the same report and trace.
for op in all-reduce reduce-scatter all-gather all-to-all broadcast reduce; do
	selected "coll-$op" || continue
	for fold in on off; do
		"$pemu" coll --op $op -g 16 -r 5 -b 8 -e 1M --nodes 2 --dry-run --fold $fold --json \
			--trace-devices all --trace "$tmp/$fold.trace" 2>&1 | sed 's/"wall_[a-z]*":[-+.eE0-9]*//g' \
			>"$tmp/$fold.json"
	done
	if cmp -s "$tmp/on.json" "$tmp/off.json" && cmp -s "$tmp/on.trace" "$tmp/off.trace"; then
		pass=$((pass + 1))
	else
		echo "fold: coll-$op: the folded report or trace differs from the unfolded one"
		fail=$((fail + 1))
	fi
done

# The largest mesh the CLI takes (65536 devices, run/check.c) runs, folded to one replica
# with two tensor-parallel ranks a stage, and reports every device; a replica's work
# does not depend on how many there are, so its compute time is the one replica's.
field() { sed -n "s/.*\"$1\":\([-+.eE0-9]*\).*/\1/p" "$2"; }
if selected largest; then
	ok=1
	for dp in 1 4096; do
		"$pemu" run --model small --dry-run --dp $dp --tp 4 --pp 4 --steps 1 --json \
			>"$tmp/dp$dp.json" 2>"$tmp/dp$dp.err" || { ok=0; head -3 "$tmp/dp$dp.err"; }
	done
	n=$(grep -o '"cap":' "$tmp/dp4096.json" | wc -l)
	if [ "$n" -ne 65536 ] || [ "$(field devices_run "$tmp/dp4096.json")" != 8 ]; then
		echo "fold: largest: $n devices reported (want 65536), $(field devices_run \
			"$tmp/dp4096.json") simulated (want 8)"
		ok=0
	fi
	if [ "$(field compute_s "$tmp/dp4096.json")" != "$(field compute_s "$tmp/dp1.json")" ]; then
		echo "fold: largest: a replica's compute differs at dp 4096 from dp 1"
		ok=0
	fi
	if [ $ok = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
fi
# pemu coll's largest group, folded; and unfolded (65536 contexts), except under the
# sanitizers (PEMU_TEST_SCALE=small), where it takes minutes.
if selected coll-largest; then
	ok=1
	folds=on
	[ "${PEMU_TEST_SCALE:-}" = small ] || folds="on off"
	for fold in $folds; do
		if ! "$pemu" coll -g 65536 --dry-run --fold $fold -b 8 -e 8 -n 1 -w 0 \
			>"$tmp/coll.out" 2>"$tmp/coll.err"; then
			echo "fold: coll-largest: pemu coll -g 65536 --fold $fold failed:"
			head -3 "$tmp/coll.err"
			ok=0
		fi
	done
	if [ $ok = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
fi
echo "fold: $pass configurations folded exactly, $fail failed"
[ $fail -eq 0 ]
