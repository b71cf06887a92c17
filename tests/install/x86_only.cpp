// The mistake check_cross_compile.py is there to catch: the header is guarded, its use is not.
// On arm64 _mm_pause does not exist, so this file must fail the check.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

void spin_once() { _mm_pause(); }
