// The vector kernels at the compiler's default target (SSE2 on x86-64); see cpu_isa.h.
#define PCV_ISA_NAMESPACE isa_baseline
#include "backend/cpu/cpu_vector_kernels.h"
