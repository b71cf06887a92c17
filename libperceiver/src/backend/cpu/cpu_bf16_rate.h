// How fast this CPU's vector bf16 dot product is against its float32 FMAs. Without AMX, bf16
// products run on AVX512-BF16's VDPBF16PS (oneDNN's avx512_core_bf16 kernels), and where that
// instruction does not outrun the FMAs in FLOPs, --precision bf16 cannot beat float32: a Sapphire
// Rapids issues one every two cycles, half the FMAs' rate (bench/README.md). Measured on
// registers, as bench_fma_peak measures the peaks (which runs these same chains).
#pragma once

#include <cstdint>

namespace perceiver::cpu {

/// Independent accumulator chains the loops below run: enough to cover each instruction's latency.
/// FMAs: latency (4-5 cycles) times two ports is 8-10 in flight, and exactly 8 is not enough in
/// practice: a Sapphire Rapids core ran 8 chains at 160 GFLOP/s and 10, 12, 16 or 24 at 176-177
/// (2 cores: 320 against 352). 12 leaves room and, with the loop's two constants, fits AVX2's 16
/// registers (bench_fma_peak runs the same count there).
constexpr int kFmaChains = 12;
constexpr int kDotChains = 16;

/// `iterations` steps of kFmaChains AVX-512 FMA chains (2·16 FLOP each per step) or of kDotChains
/// VDPBF16PS chains (4·16 FLOP each), on registers, on the calling thread; the result depends on
/// every chain. Only on x86-64 CPUs with AVX-512F (and AVX512-BF16 for the dot product).
float avx512_fma_chains(int64_t iterations);
float bf16_dot_chains(int64_t iterations);
/// The same with 2·kFmaChains FMA chains: no faster than avx512_fma_chains(2 · iterations) where
/// kFmaChains covers the latency (CpuBf16.TheFmaChainsReachThePeak).
float avx512_fma_chains_doubled(int64_t iterations);

/// VDPBF16PS's FLOP rate over the FMAs', the best of a few ~1 ms rounds on the calling thread,
/// measured once per process; 0 on a CPU without AVX512-BF16 (or off x86-64).
double bf16_dot_rate();

/// Below this rate a bf16 step on the dot product (operands rounded, the float32 work unchanged)
/// does not beat float32; the CPU backend's description then says so.
constexpr double kMinUsefulDotRate = 1.5;

}  // namespace perceiver::cpu
