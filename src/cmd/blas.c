/* cmd/blas: which GEMM kernels OpenBLAS runs; see cmd.h. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
