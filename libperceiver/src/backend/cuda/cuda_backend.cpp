#include "backend/cuda/cuda_backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_kernels.h"

namespace perceiver::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's workspace (Hopper kernels use up to 32 MiB)
constexpr size_t kStagingMinBytes = size_t(64) << 20;   // pinned staging for uploads, grown to 2× the largest
constexpr size_t kStagingMaxCopy = size_t(256) << 20;   // larger uploads (weights at load time) copy directly

const char* const kNoGpuHint =
    "HINT: this machine or container has no NVIDIA driver or no GPU visible to this process (check nvidia-smi, "
    "that the container was started with the GPUs exposed, and CUDA_VISIBLE_DEVICES); --device cpu trains on "
    "the CPU";

int visible_devices() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  PCV_CHECK(e == cudaSuccess, "device 'cuda': no usable NVIDIA GPU: cudaGetDeviceCount failed with ",
            cudaGetErrorName(e), " (", cudaGetErrorString(e), "). ", kNoGpuHint);
  PCV_CHECK(n > 0, "device 'cuda': no usable NVIDIA GPU: cudaGetDeviceCount found 0 devices. ", kNoGpuHint);
  return n;
}

// The local rank an MPI launcher exported, or -1 (OpenMPI, MPICH/Intel MPI, Slurm).
int local_rank_from_env(std::string* source) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    PCV_CHECK(end && *end == '\0' && r >= 0, "environment variable ", name, "='", v, "' is not a local rank");
    *source = std::string("the MPI local rank, ") + name + "=" + v;
    return int(r);
  }
  return -1;
}

std::string gib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", double(bytes) / double(1ull << 30));
  return s;
}

}  // namespace

int requested_device(const BackendOptions& options) {
  if (options.device_index >= 0) return options.device_index;
  std::string source;
  return local_rank_from_env(&source);
}

void* Workspace::get(Slot slot, size_t bytes) {
  Buffer& b = slots_[size_t(slot)];
  if (b.bytes() < bytes) {
    // Kernels still queued may read the old memory: wait for them before it is freed.
    PCV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    b = Buffer();
    b = backend_->allocate(bytes + bytes / 4);  // headroom: a slightly larger later shape does not reallocate
  }
  return b.data();
}

struct CudaBackend::State {
  int device = 0;
  std::string device_source;
  cudaDeviceProp prop{};
  Precision precision = Precision::kFp32;
  // Counters first: the buffers below free through them when State is destroyed.
  int64_t allocations = 0, in_use = 0, peak = 0;
  CudaHandle handle;
  Buffer lt_workspace;
  std::unique_ptr<Workspace> ws;
  std::unique_ptr<GemmPlans> plans;
  // Pinned staging ring for uploads: copies take consecutive regions; wrapping to the start
  // waits for the last copy enqueued (so every earlier region is free again).
  void* staging = nullptr;
  size_t staging_bytes = 0, staging_head = 0;
  cudaEvent_t staged = nullptr;
  bool staged_pending = false;

  void grow_staging(size_t bytes);
};

void CudaBackend::State::grow_staging(size_t bytes) {
  PCV_CUDA_CHECK(cudaStreamSynchronize(handle.stream));
  if (staging) PCV_CUDA_CHECK(cudaFreeHost(staging));
  staging = nullptr;
  const size_t want = std::max(kStagingMinBytes, 2 * bytes);
  PCV_CUDA_CHECK(cudaHostAlloc(&staging, want, cudaHostAllocDefault));
  ++allocations;
  staging_bytes = want;
  staging_head = 0;
  staged_pending = false;
}

CudaBackend::CudaBackend(const BackendOptions& options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  const int count = visible_devices();
  s.device = options.device_index;
  s.device_source = "--device_index";
  if (s.device < 0) {
    s.device = local_rank_from_env(&s.device_source);
    // A launcher that gives each rank its own GPU (CUDA_VISIBLE_DEVICES, Slurm --gpus-per-task=1)
    // leaves one visible device whatever the local rank.
    if (s.device > 0 && count == 1) s.device = 0, s.device_source += ", the one GPU visible to this rank";
  }
  if (s.device < 0) s.device = 0, s.device_source = "the first GPU";
  PCV_CHECK(s.device < count, "device 'cuda': GPU ", s.device, " requested (", s.device_source, ") but only ", count,
            " visible. HINT: one rank per GPU: run at most ", count,
            " ranks per node (mpirun -npernode), or check CUDA_VISIBLE_DEVICES");
  PCV_CUDA_CHECK(cudaSetDevice(s.device));
  PCV_CUDA_CHECK(cudaGetDeviceProperties(&s.prop, s.device));
  check_kernel_image(s.prop.name, s.prop.major, s.prop.minor);
  s.precision = options.precision;
  PCV_CHECK(s.precision == Precision::kFp32 || s.prop.major >= 8, "device 'cuda': precision bf16 needs bfloat16 ",
            "tensor cores (compute capability 8.0 or newer); ", s.prop.name, " is ", s.prop.major, ".", s.prop.minor,
            ". HINT: use --precision fp32");
  CudaHandle& h = s.handle;
  PCV_CUDA_CHECK(cudaStreamCreateWithFlags(&h.stream, cudaStreamNonBlocking));
  PCV_CUDA_CHECK(cudaEventCreateWithFlags(&s.staged, cudaEventDisableTiming));
  PCV_CUBLAS_CHECK(cublasLtCreate(&h.lt));
  s.lt_workspace = allocate(kLtWorkspaceBytes);
  h.lt_workspace = s.lt_workspace.data();
  h.lt_workspace_bytes = kLtWorkspaceBytes;
  h.precision = s.precision;
  h.sm_count = s.prop.multiProcessorCount;
  s.ws = std::make_unique<Workspace>(*this, h.stream);
  s.plans = std::make_unique<GemmPlans>();
  h.ws = s.ws.get();
  h.plans = s.plans.get();
  check_complete(kernel_table(), "cuda");
}

CudaBackend::~CudaBackend() {
  State& s = *s_;
  cudaStreamSynchronize(s.handle.stream);
  s.plans.reset();
  s.ws.reset();
  s.lt_workspace = Buffer();
  if (s.handle.lt) cublasLtDestroy(s.handle.lt);
  if (s.staging) cudaFreeHost(s.staging);
  if (s.staged) cudaEventDestroy(s.staged);
  if (s.handle.stream) cudaStreamDestroy(s.handle.stream);
}

std::string CudaBackend::describe() const {
  const State& s = *s_;
  const std::string prec = s.precision == Precision::kBf16
                               ? "bf16 (bfloat16 products and attention, float32 accumulation, float32 master weights "
                                 "and optimizer states)"
                               : "fp32 (float32 products, TF32 off)";
  return "cuda: " + std::string(s.prop.name) + " (GPU " + std::to_string(s.device) + ", " + s.device_source +
         "; compute capability " + std::to_string(s.prop.major) + "." + std::to_string(s.prop.minor) + ", " +
         std::to_string(s.prop.multiProcessorCount) + " SMs, " + gib(s.prop.totalGlobalMem) + "), precision " + prec +
         ", cuBLASLt products";
}

Buffer CudaBackend::allocate(size_t bytes) {
  if (bytes == 0) return {};
  State* s = s_.get();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory error is not sticky: clear it
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    PCV_FAIL("cuda: cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
             "); ", gib(free_b), " free of ", gib(total_b), ", this backend holds ", gib(size_t(s->in_use)),
             ". HINT: a smaller --batch_size (or grad_accum_usteps for the same global batch), or --precision bf16");
  }
  ++s->allocations;
  s->in_use += int64_t(bytes);
  s->peak = std::max(s->peak, s->in_use);
  return Buffer(p, bytes, [s, bytes](void* q) {
    cudaFree(q);
    s->in_use -= int64_t(bytes);
  });
}

void CudaBackend::zero(void* dst, size_t bytes) {
  if (bytes) PCV_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s_->handle.stream));
}

void CudaBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  State& s = *s_;
  cudaStream_t stream = s.handle.stream;
  if (bytes > kStagingMaxCopy) {  // load-time copies (weights): not worth pinning
    // On our stream, then waited for: a pageable cudaMemcpy may return before its DMA lands, on
    // the legacy stream, which our non-blocking stream does not wait for.
    PCV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    PCV_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  if (2 * bytes > s.staging_bytes) s.grow_staging(bytes);
  if (s.staging_head + bytes > s.staging_bytes) {
    if (s.staged_pending) PCV_CUDA_CHECK(cudaEventSynchronize(s.staged));
    s.staging_head = 0;
  }
  char* stage = static_cast<char*>(s.staging) + s.staging_head;
  std::memcpy(stage, src, bytes);
  PCV_CUDA_CHECK(cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, stream));
  PCV_CUDA_CHECK(cudaEventRecord(s.staged, stream));
  s.staged_pending = true;
  s.staging_head += (bytes + 255) / 256 * 256;
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  PCV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s_->handle.stream));
  PCV_CUDA_CHECK(cudaStreamSynchronize(s_->handle.stream));
}

void CudaBackend::synchronize() { PCV_CUDA_CHECK(cudaStreamSynchronize(s_->handle.stream)); }

void* CudaBackend::handle() const { return &s_->handle; }

Precision CudaBackend::precision() const { return s_->precision; }

const KernelTable<float>& CudaBackend::kernels_f32() const { return kernel_table(); }

std::optional<MemoryStats> CudaBackend::memory_stats() const {
  return MemoryStats{s_->allocations, s_->in_use, s_->peak};
}

size_t CudaBackend::collectives_id_bytes() const { return kNcclIdBytes; }

void CudaBackend::make_collectives_id(void* id) const { make_nccl_id(id); }

std::unique_ptr<DeviceCollectives> CudaBackend::join_collectives(const void* id, int rank, int world) {
  return join_nccl(id, rank, world, s_->handle.stream);
}

int CudaBackend::device() const { return s_->device; }

}  // namespace perceiver::cuda
