#!/bin/sh
# The README's two commands on the first try, as on a fresh machine without the packages:
# each in its own copy of this tree (without build/), with -j2, with a PATH shim in front
# that pretends none of the Debian packages is installed until `make` installs them:
#
#   pkg-config  fails until libopenblas-dev, libcmocka-dev and pkg-config are "installed",
#               then is the real one
#   dpkg -s P   fails until P is "installed"
#   apt-get     records what it is asked and "installs" it (writes its names to a list)
#   sudo        runs its command (so no real apt-get runs through sudo either)
#   gnuplot     is not on PATH until gnuplot-nox is "installed" (a PATH directory that
#               has it is replaced by one of symlinks to all the rest)
#
# Checks that `make -j2 run` and `make -j2 test` pass the first time (the bug: the flags
# were read from pkg-config before the packages were there, and under -j the compiles did
# not wait for them), ask apt-get for what the build needs and not for gnuplot, and that
# a second `make run` installs and rebuilds nothing; that `make deps` still asks for
# everything, gnuplot too; that `make clean` and `make format-check` install nothing.
# The run is shortened (RUN_STEPS=3, two test programs, one golden case) but builds and
# links pemu and every test program. Needs the packages really installed (the shim hands
# over to the real pkg-config and dpkg). FRESH_KEEP=1 keeps the copies and logs. Exit 0
# when all hold, 1 otherwise.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$root/Makefile" ] || [ ! -f "$root/tests/fresh-machine.sh" ]; then
	echo "fresh-machine: run it as tests/fresh-machine.sh of a pemu tree" >&2; exit 1
fi
real_pkgconfig=$(command -v pkg-config) || { echo "fresh-machine: needs pkg-config" >&2; exit 1; }
real_dpkg=$(command -v dpkg) || { echo "fresh-machine: needs dpkg" >&2; exit 1; }
real_gnuplot=$(command -v gnuplot) || real_gnuplot=/usr/bin/gnuplot
"$real_pkgconfig" --exists openblas cmocka ||
	{ echo "fresh-machine: needs openblas and cmocka installed (make deps)" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
if [ "${FRESH_KEEP:-0}" = 1 ]; then echo "fresh-machine: keeping $tmp"
else trap 'rm -rf "$tmp"' EXIT; fi
shim=$tmp/bin
installed=$tmp/installed  # the packages "installed" so far, one a line
asked=$tmp/apt-get.log    # every apt-get command line
mkdir -p "$shim"

cat >"$shim/pkg-config" <<EOF
#!/bin/sh
for p in libopenblas-dev libcmocka-dev pkg-config; do
	grep -qx "\$p" "$installed" 2>/dev/null ||
		{ echo "pkg-config (shim): \$p is not installed" >&2; exit 1; }
done
exec "$real_pkgconfig" "\$@"
EOF
cat >"$shim/dpkg" <<EOF
#!/bin/sh
if [ "\$1" = -s ]; then
	grep -qx "\$2" "$installed" 2>/dev/null ||
		{ echo "dpkg-query: package '\$2' is not installed (shim)" >&2; exit 1; }
fi
exec "$real_dpkg" "\$@"
EOF
cat >"$shim/apt-get" <<EOF
#!/bin/sh
echo "apt-get \$*" >>"$asked"
install=0
for a in "\$@"; do
	case "\$a" in
	install) install=1 ;;
	-*) ;;
	*) [ \$install = 1 ] && echo "\$a" >>"$installed" ;;
	esac
done
grep -qx gnuplot-nox "$installed" 2>/dev/null && ln -sf "$real_gnuplot" "$shim/gnuplot"
exit 0
EOF
cat >"$shim/sudo" <<EOF
#!/bin/sh
exec env "\$@"
EOF
chmod +x "$shim"/*
path=$shim n=0
IFS=:
for d in $PATH; do
	if [ -e "$d/gnuplot" ]; then
		n=$((n + 1)) && mkdir "$tmp/path$n" && ln -s "$d"/* "$tmp/path$n/" || exit 1
		rm -f "$tmp/path$n"/gnuplot*
		d=$tmp/path$n
	fi
	path=$path:$d
done
unset IFS
if PATH=$path command -v gnuplot >/dev/null; then echo "fresh-machine: cannot hide gnuplot" >&2; exit 1; fi
fails=0
t0=$(date +%s)
# fresh NAME: a copy of the tree in $tmp/NAME, entered, and a machine with nothing installed.
fresh() {
	rm -f "$installed" "$asked"
	mkdir "$tmp/$1" || exit 1
	(cd "$root" && tar --exclude=./build --exclude=./.git -cf - .) | (cd "$tmp/$1" && tar -xf -)
	cd "$tmp/$1" || exit 1
	before=$fails
}
fail() { echo "fresh-machine: FAIL: $*"; fails=$((fails + 1)); }
# step NAME COMMAND...: runs COMMAND with the shim, its output in $tmp/NAME.log.
step() {
	name=$1; shift
	PATH=$path "$@" >"$tmp/$name.log" 2>&1 && return 0
	fail "'$*' failed; its output ends:"
	tail -25 "$tmp/$name.log"
	return 1
}
# passed MESSAGE: says MESSAGE if nothing failed since fresh.
passed() { [ $fails = "$before" ] && echo "fresh-machine: $*"; }
asked_for() { grep -q "install.* $1\( \|\$\)" "$asked" 2>/dev/null; }
compiles() { grep -c '^  CC' "$tmp/$1.log"; }

fresh run
if step run make -j2 run RUN_STEPS=3; then
	grep -q 'step  *3/3' "$tmp/run.log" || fail "make run: no 'step 3/3' in its output"
	asked_for libopenblas-dev || fail "make run: did not ask apt-get for libopenblas-dev"
	asked_for gnuplot-nox && fail "make run: asked apt-get for gnuplot-nox"
	passed "make -j2 run passed on the first try ($(compiles run) compiles, apt-get" \
		"installed $(tr '\n' ' ' <"$installed"| sed 's/ $//'))"
	rm -f "$asked"
	if step run-again make -j2 run RUN_STEPS=3; then
		[ -e "$asked" ] && fail "a second make run called apt-get"
		[ "$(compiles run-again)" = 0 ] || fail "a second make run compiled again"
		passed "a second make -j2 run installed and compiled nothing"
	fi
fi

fresh test
# shellcheck disable=SC2016
if step test make -j2 test TEST_RUN='$(BUILD)/tests/test_units $(BUILD)/tests/test_cli' \
	PEMU_GOLDEN_FILTER=train-tiny; then
	grep -q 'tests: [1-9][0-9]* passed, 0 failed' "$tmp/test.log" ||
		fail "make test: no 'tests: N passed, 0 failed'"
	grep -q 'golden: 1 configurations identical, 0 differ' "$tmp/test.log" ||
		fail "make test: the golden case did not pass"
	asked_for libcmocka-dev || fail "make test: did not ask apt-get for libcmocka-dev"
	asked_for gnuplot-nox && fail "make test: asked apt-get for gnuplot-nox"
	links=$(grep -c '^  LINK    build/tests/' "$tmp/test.log")
	set -- tests/test_*.c
	[ "$links" = $# ] || fail "make test: linked $links test programs, not all"
	passed "make -j2 test passed on the first try ($(compiles test) compiles," \
		"$links test programs linked)"
fi

fresh deps
if step deps make deps; then
	for p in libopenblas-dev libcmocka-dev gnuplot-nox pkg-config; do
		asked_for $p || fail "make deps: did not ask apt-get for $p"
	done
	passed "make deps asked apt-get for everything, gnuplot-nox too"
fi
rm -f "$installed" "$asked"
before=$fails
if step clean make clean && step format-check make -n format-check; then
	[ -e "$asked" ] && fail "make clean or make format-check called apt-get"
	passed "make clean and make format-check installed nothing"
fi

cd "$root" || exit 1
[ $fails = 0 ] || exit 1
echo "fresh-machine: the README's commands work on the first try ($(( $(date +%s) - t0 )) s)"
