/* cmd/blas: the host's compute: which GEMM kernels OpenBLAS runs, and how many host
 * threads a device's kernels share; see cmd.h. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "cmd/cmd.h"

void cmd_blas_kernels(char **argv)
{
#if defined(__x86_64__)
	const char *kind = NULL;

	if (getenv("OPENBLAS_CORETYPE") || strcmp(openblas_get_corename(), "Prescott"))
		return;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
		kind = "SkylakeX";
	else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		kind = "Haswell";
	if (!kind || setenv("OPENBLAS_CORETYPE", kind, 1))
		return;
	execv("/proc/self/exe", argv); /* if it fails, the baseline kernels it is */
#else
	(void)argv;
#endif
}

int cmd_host_threads(const struct emu_config *ec)
{
	const char *env = getenv("OPENBLAS_NUM_THREADS");
	long n = ec->workers > 0 ? ec->workers
		 : env && *env   ? strtol(env, NULL, 10)
				 : sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

int cmd_team_threads(const struct emu_config *ec, int devices)
{
	int n = cmd_host_threads(ec) - devices + 1;

	return ec->dry_run || n < 1 ? 1 : n;
}
