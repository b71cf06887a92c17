// oneDNN's matmul on the calling thread (cpu_dnnl.h).
#include "backend/cpu/cpu_dnnl.h"

#include "backend/cpu/cpu_sgemm.h"

#include <cstdlib>
#include <cstring>

#include "perceiver/error.h"

#ifdef PCV_USE_DNNL
#include <omp.h>

#include <map>
#include <mutex>
#include <tuple>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu_workspace.h"
#endif

namespace perceiver::cpu {

#ifdef PCV_USE_DNNL

namespace {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One single-threaded matmul primitive per shape for the whole process, made by the first thread
// that meets the shape (every shape of a step is met in the first step, whichever thread runs
// which piece). oneDNN primitives may run on several threads at once; each brings its own
// scratchpad.
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, scratchpad;
  size_t scratchpad_bytes = 0;
  // Whether oneDNN runs this shape with its brgemm kernels. For some shapes it picks its own JIT
  // sgemm instead ("gemm:jit"), whose kernels point the stack register at a heap buffer: a signal
  // handled meanwhile (the trainer's SIGTERM stop, a profiler's SIGPROF) pushes its frame into the
  // heap. Fixed in oneDNN 3.11.2 (issue #4845); Debian 12 ships 2.6.3.
  bool brgemm = false;
};

using Key = std::tuple<bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

Matmul make_matmul(const Key& key) {
  const auto [bf16, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta] = key;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  const dt in = bf16 ? dt::bf16 : dt::f32;
  Matmul mm;
  mm.a = dnnl::memory::desc({m, k}, in, ta ? dims{1, lda} : dims{lda, 1});
  mm.b = dnnl::memory::desc({k, n}, in, tb ? dims{1, ldb} : dims{ldb, 1});
  mm.c = dnnl::memory::desc({m, n}, dt::f32, {ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);  // sizes the primitive's work split for the one thread that runs it
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.a, mm.b, mm.c), attr, engine());
  mm.prim = dnnl::matmul(pd);
  omp_set_num_threads(saved);
  mm.brgemm = std::strncmp(pd.impl_info_str(), "brg", 3) == 0;
  mm.scratchpad = pd.scratchpad_desc();
  mm.scratchpad_bytes = mm.scratchpad.get_size();
  return mm;
}

const Matmul& matmul_for(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, Matmul> cache;  // node-based: entries stay where they are
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_matmul(key)).first;
  return it->second;
}

// A memory object over `data` through the C API (the C++ wrapper adds a shared_ptr per object).
struct Memory {
  Memory(const dnnl::memory::desc& d, void* data) {
    const dnnl_status_t st = dnnl_memory_create(&handle, &d.data, engine().get(), data);
    PCV_CHECK(st == dnnl_success, "oneDNN: cannot describe a matmul operand (status ", int(st), ")");
  }
  ~Memory() { dnnl_memory_destroy(handle); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  dnnl_memory_t handle = nullptr;
};

}  // namespace

// Runs on the calling thread: oneDNN's OpenMP region gets a team of one. After a shape's first
// call nothing of ours allocates (the operand descriptions and the argument map are oneDNN's own;
// tests/backend/test_step_allocations).
bool dnnl_matmul(MatmulInputs inputs, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local dnnl::stream stream(engine());
  const Matmul& mm = matmul_for({inputs == MatmulInputs::kBf16, ta == Transpose::kYes, tb == Transpose::kYes, m, n,
                                 k, lda, ldb, ldc, alpha, beta});
  if (inputs == MatmulInputs::kFloat32 && !mm.brgemm) return false;
  const Memory ma(mm.a, const_cast<void*>(a)), mb(mm.b, const_cast<void*>(b)), mc(mm.c, c);
  const bool scratch = mm.scratchpad_bytes > 0;
  void* const pad_data = scratch ? thread_scratch(Slot::kDnnlScratchpad, mm.scratchpad_bytes) : c;
  const Memory pad(scratch ? mm.scratchpad : mm.c, pad_data);
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma.handle}, {DNNL_ARG_WEIGHTS, mb.handle},
                                  {DNNL_ARG_DST, mc.handle}, {DNNL_ARG_SCRATCHPAD, pad.handle}};
  // Called outside a parallel region with several threads (a small product on the main thread),
  // oneDNN would open a team of them on a primitive and scratchpad sized for one.
  const bool own_team = !omp_in_parallel() && omp_get_max_threads() > 1;
  const int saved = own_team ? omp_get_max_threads() : 1;
  if (own_team) omp_set_num_threads(1);
  const dnnl_status_t st = dnnl_primitive_execute(mm.prim.get(), stream.get(), scratch ? 4 : 3, args);
  if (own_team) omp_set_num_threads(saved);
  PCV_CHECK(st == dnnl_success, "oneDNN matmul ", m, "x", n, "x", k, " failed (status ", int(st), ")");
  return true;
}

std::string dnnl_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";  // SSE4.1, or a CPU oneDNN has no JIT kernels for (arm64 here)
  }
}

#else  // no oneDNN in this build

bool dnnl_matmul(MatmulInputs, Transpose, Transpose, int64_t, int64_t, int64_t, float, const void*, int64_t,
                 const void*, int64_t, float, float*, int64_t) {
  PCV_FAIL("oneDNN matmul: this build has no oneDNN (PERCEIVER_WITH_DNNL=OFF)");
}

std::string dnnl_isa() { return ""; }

#endif

bool dnnl_float32_products() { return float32_gemm() == Float32Gemm::kOneDnn; }

}  // namespace perceiver::cpu
