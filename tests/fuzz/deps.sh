#!/bin/sh
# Installs what make fuzz needs if it is missing: clang, and the libFuzzer runtime of its
# version (Debian's libclang-rt-N-dev, which clang does not pull in by itself). As root,
# or through sudo; else says what to install.
set -e
fuzz_links() {
	printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return (int)(d && n); }\n' \
		> /tmp/pemu-fuzz-probe.c
	clang -fsanitize=fuzzer -o /tmp/pemu-fuzz-probe /tmp/pemu-fuzz-probe.c 2>/dev/null
}
command -v clang >/dev/null 2>&1 && fuzz_links && exit 0
as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
		echo "make fuzz needs clang and its libFuzzer runtime: apt-get install clang" \
			"libclang-rt-dev (or libclang-rt-N-dev for clang N)" >&2
		exit 1
	fi
}
export DEBIAN_FRONTEND=noninteractive
command -v clang >/dev/null 2>&1 || {
	as_root apt-get update -qq
	as_root apt-get install -y -qq --no-install-recommends clang
}
fuzz_links && exit 0
v=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
as_root apt-get install -y -qq --no-install-recommends "libclang-rt-$v-dev"
fuzz_links || { echo "make fuzz: clang -fsanitize=fuzzer still does not link" >&2; exit 1; }
