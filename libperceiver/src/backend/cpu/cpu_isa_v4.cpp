// The vector kernels for x86-64-v4 (AVX-512), compiled with -march=x86-64-v4; see cpu_isa.h.
#if defined(__x86_64__)
#define PCV_ISA_NAMESPACE isa_v4
#include "backend/cpu/cpu_vector_kernels.h"
#endif
