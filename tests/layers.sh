#!/bin/sh
# The floors of docs/architecture.md, checked on the sources' #include lines:
#   cmd -> run -> pipe -> par -> models -> emu
# each folder includes only its own and the floors below; pipe/ sees par/ only through
# its stage interface (par/model.h, par/layer.h), and the schedule, its checker and its
# interpreter see no par/ at all. Prints each violation; exit 1 if any.
cd "$(dirname "$0")/.." || exit 1
bad=0
check() { # files, forbidden include pattern, why
	for f in $1; do
		hits=$(grep -n "^#include \"$2" "$f" 2>/dev/null)
		if [ -n "$hits" ]; then
			printf '%s: %s (%s)\n' "$f" "$hits" "$3"
			bad=1
		fi
	done
}
check "emu/*.[ch]" '\(gpt\|attention\|moe\|ops\|linear\|tensor\|optim\|data\|presets\)\.h\|\(cmd\|run\|pipe\|par\)/' "emu/ knows nothing above it"
check "models/*.[ch]" '\(cmd\|run\|pipe\|par\)/' "models/ knows no parallelism"
check "src/par/*.[ch]" '\(cmd\|run\|pipe\)/' "par/ never includes pipe/, run/ or cmd/"
check "src/pipe/*.[ch]" '\(cmd\|run\)/' "pipe/ is below run/ and cmd/"
check "src/pipe/*.[ch]" 'par/\(tp\|sp\|dp\|recompute\|internal\)\.h' "pipe/ sees par/ through model.h and layer.h only"
check "src/pipe/schedule.[ch] src/pipe/sched_check.c src/pipe/sched_exec.c" 'par/' "the schedule, checker and interpreter know no model"
check "src/run/*.[ch]" 'cmd/' "run/ is below cmd/"
[ $bad -eq 0 ] && echo "layers: every #include keeps to its floor"
exit $bad
