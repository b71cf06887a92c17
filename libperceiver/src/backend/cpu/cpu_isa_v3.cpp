// The vector kernels for x86-64-v3 (AVX2, FMA), compiled with -march=x86-64-v3; see cpu_isa.h.
#if defined(__x86_64__)
#define PCV_ISA_NAMESPACE isa_v3
#include "backend/cpu/cpu_vector_kernels.h"
#endif
