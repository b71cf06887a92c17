// How fast this CPU's vector bf16 dot product is against its float32 FMAs. Without AMX, bf16
// products run on AVX512-BF16's VDPBF16PS (oneDNN's avx512_core_bf16 kernels), and where that
// instruction does not outrun the FMAs in FLOPs, --precision bf16 cannot beat float32: a Sapphire
// Rapids issues one every two cycles, 0.54x the FMAs' rate (bench/README.md). Measured on
// registers, as bench_fma_peak measures the peaks (which runs these same chains).
#pragma once

#include <cstdint>

namespace perceiver::cpu {

/// Independent accumulator chains the loops below run: enough to cover each instruction's latency.
constexpr int kFmaChains = 8;
constexpr int kDotChains = 16;

/// `iterations` steps of kFmaChains AVX-512 FMA chains (2·16 FLOP each per step) or of kDotChains
/// VDPBF16PS chains (4·16 FLOP each), on registers, on the calling thread; the result depends on
/// every chain. Only on x86-64 CPUs with AVX-512F (and AVX512-BF16 for the dot product).
float avx512_fma_chains(int64_t iterations);
float bf16_dot_chains(int64_t iterations);

/// VDPBF16PS's FLOP rate over the FMAs', the best of a few ~1 ms rounds on the calling thread,
/// measured once per process; 0 on a CPU without AVX512-BF16 (or off x86-64).
double bf16_dot_rate();

/// Below this rate a bf16 step on the dot product (operands rounded, the float32 work unchanged)
/// does not beat float32; the CPU backend's description then says so.
constexpr double kMinUsefulDotRate = 1.5;

}  // namespace perceiver::cpu
