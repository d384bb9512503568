#!/bin/sh
# The floors of docs/architecture.md, checked on the sources' #include lines:
#   cmd -> run -> pipe -> par -> models -> emu
# each folder includes only its own and the floors below; pipe/ sees par/ only through
# its stage interface (par/model.h, par/layer.h), and the schedule, its checker and its
# interpreter see no par/ at all. Includes that climb out of the search path ("../") or
# name a private header without its folder (a bare "internal.h" is emu's) are refused
# everywhere, so the rules cannot be walked around. Prints each violation; exit 1 if any.
cd "$(dirname "$0")/.." || exit 1
bad=0
# files, an include pattern they must not use (grep BRE, after '#include "'), why
deny() {
	for f in $1; do
		hits=$(grep -n "^#include \"$2" "$f" 2>/dev/null)
		if [ -n "$hits" ]; then
			printf '%s: %s (%s)\n' "$f" "$hits" "$3"
			bad=1
		fi
	done
}
# files, the par/ headers they may include (an ERE alternation), why
allow_par() {
	for f in $1; do
		hits=$(grep -n '^#include "par/' "$f" 2>/dev/null | grep -Ev "#include \"par/($2)\\.h\"")
		if [ -n "$hits" ]; then
			printf '%s: %s (%s)\n' "$f" "$hits" "$3"
			bad=1
		fi
	done
}
models='\(gpt\|attention\|moe\|moe_internal\|ops\|linear\|tensor\|optim\|data\|presets\|rng\|dropout\|vmath\)\.h'
all="emu/*.[ch] models/*.[ch] src/*/*.[ch] tests/*.[ch] bench/*.[ch]"
deny "$all" '[^"]*\.\./' "no include climbs out of the search path"
deny "models/*.[ch] src/*/*.[ch] tests/*.[ch] bench/*.[ch]" 'internal\.h' \
	"emu's private header is emu's; par's is par/internal.h"
deny "src/cmd/*.[ch] src/run/*.[ch] src/pipe/*.[ch] tests/*.[ch] bench/*.[ch]" 'par/[a-z_]*internal\.h' \
	"par/internal.h and par/cp_internal.h are par/'s own"
deny "src/*/*.[ch] tests/*.[ch] bench/*.[ch]" 'moe_internal\.h' \
	"models/moe_internal.h is models/moe*.c's own"
deny "emu/*.[ch]" "$models\\|\\(cmd\\|run\\|pipe\\|par\\)/" "emu/ knows nothing above it"
deny "models/*.[ch]" '\(cmd\|run\|pipe\|par\)/' "models/ knows no parallelism"
deny "src/par/*.[ch]" '\(cmd\|run\|pipe\)/' "par/ never includes pipe/, run/ or cmd/"
deny "src/pipe/*.[ch]" '\(cmd\|run\)/' "pipe/ is below run/ and cmd/"
allow_par "src/pipe/*.[ch]" 'model|layer' "pipe/ sees par/ through model.h and layer.h only"
deny "src/pipe/schedule.[ch] src/pipe/sched_check.c src/pipe/sched_exec.c" 'par/' \
	"the schedule, checker and interpreter know no model"
deny "src/run/*.[ch]" 'cmd/' "run/ is below cmd/"
[ $bad -eq 0 ] && echo "layers: every #include keeps to its floor"
exit $bad
