// The model ops (op_params.h): row gathers, the multimodal input array and its padding /
// mask-token gradients, the decoder queries and their gradients, the reconstruction targets.
// One thread per output element through the bodies in bodies/model_index.h; the sums are the
// CPU's row-block sums in the CPU's order (cuda_reduce.cuh).
#include "backend/cuda/bodies/model_index.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace perceiver::cuda {
namespace {

__global__ void gather_rows_kernel(int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n,
                                   const float* src, float* dst) {
  for (int64_t e = global_thread(); e < batch * n * cols; e += grid_threads()) {
    const int64_t b = e / (n * cols), rest = e % (n * cols);
    dst[e] = src[(b * rows + row0) * cols + rest];
  }
}

__global__ void scatter_add_rows_kernel(int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n,
                                        const float* src, float* dst) {
  for (int64_t e = global_thread(); e < batch * n * cols; e += grid_threads()) {
    const int64_t b = e / (n * cols), rest = e % (n * cols);
    dst[(b * rows + row0) * cols + rest] += src[e];
  }
}

__global__ void broadcast_rows_kernel(int64_t batch, int64_t n, const float* src, float* dst) {
  for (int64_t e = global_thread(); e < batch * n; e += grid_threads()) dst[e] = src[e % n];
}

__global__ void embed_forward_kernel(EmbedDims d, EmbedArgs<float> a, int64_t row0, int64_t n, float* x_rows) {
  const int64_t total = n * d.channels;
  for (int64_t e = global_thread(); e < total; e += grid_threads())
    x_rows[e] = body::embed_value(d, a, row0 + e / d.channels, e % d.channels);
}

// partial[blk][slot][C] for the six sums of embed_grad_slot, one thread per (row block, channel)
// adding its rows in order (backend/cpu embed_backward_rows).
__global__ void embed_backward_partials(EmbedDims d, const uint8_t* mask, int64_t row0, int64_t n, const float* dx,
                                        int64_t blocks, double* partial) {
  const int64_t C = d.channels;
  for (int64_t t = global_thread(); t < blocks * C; t += grid_threads()) {
    const int64_t blk = t / C, j = t % C;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0;
    const int64_t end = body::hd_min(n, (blk + 1) * kRowBlock);
    for (int64_t r = blk * kRowBlock; r < end; ++r) {
      const int64_t row = row0 + r;
      const double v = dx[r * C + j];
      switch (body::embed_grad_slot(d, mask[row] != 0, row, j)) {
        case 0: s0 += v; break;
        case 1: s1 += v; break;
        case 2: s2 += v; break;
        case 3: s3 += v; break;
        case 4: s4 += v; break;
        case 5: s5 += v; break;
        default: break;
      }
    }
    double* p = partial + blk * 6 * C + j;
    p[0] = s0, p[C] = s1, p[2 * C] = s2, p[3 * C] = s3, p[4 * C] = s4, p[5 * C] = s5;
  }
}

__global__ void embed_backward_finish(EmbedDims d, int64_t blocks, const double* partial, EmbedGrads<float> g) {
  const int64_t C = d.channels;
  for (int64_t t = global_thread(); t < 3 * C; t += grid_threads()) {
    const int m = int(t / C);
    const int64_t j = t % C, from = body::embed_pad_from(d, m);
    double sp = 0, sm = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sp += partial[(blk * 6 + m) * C + j];
      sm += partial[(blk * 6 + 3 + m) * C + j];
    }
    float* pad = m == 0 ? g.pad_audio : m == 1 ? g.pad_image : g.pad_label;
    float* mask_token = m == 0 ? g.mask_audio : m == 1 ? g.mask_image : g.mask_label;
    if (j >= from) pad[j - from] += float(sp);
    mask_token[j] += float(sm);
  }
}

__global__ void queries_forward_kernel(QueryDims d, QueryArgs<float> a, float* q) {
  const int64_t E = d.channels, O = d.num_audio + d.num_image + 1, total = d.batch * O * E;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) q[e] = body::query_value(d, a, (e / E) % O, e % E);
}

// Rows [row0, row0 + n) of every batch item of dq [B, O, E], columns [from, from + width).
struct QueryRows {
  int64_t n, row0, from, rows_per_item, E;
  const float* dq;
  __device__ double operator()(int64_t r, int64_t j) const {
    return double(dq[((r / n) * rows_per_item + row0 + r % n) * E + from + j]);
  }
};

__global__ void gather_targets_kernel(TargetDims d, const int64_t* image_points, const int64_t* audio_points,
                                      const float* video, const float* audio, float* image_targets,
                                      float* audio_targets) {
  const int64_t ni = d.batch * d.num_image * 3, na = d.batch * d.num_audio * d.samples_per_patch;
  for (int64_t e = global_thread(); e < ni + na; e += grid_threads()) {
    if (e < ni) image_targets[e] = video[body::image_target_source(d, image_points, e)];
    else audio_targets[e - ni] = audio[body::audio_target_source(d, audio_points, e - ni)];
  }
}

}  // namespace

void gather_rows(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const float* src,
                 float* dst) {
  const int64_t total = batch * n * cols;
  if (total == 0) return;
  gather_rows_kernel<<<grid_for(total), kThreads, 0, handle_of(h).stream>>>(batch, rows, cols, row0, n, src, dst);
  PCV_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

void scatter_add_rows(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const float* src,
                      float* dst) {
  const int64_t total = batch * n * cols;
  if (total == 0) return;
  scatter_add_rows_kernel<<<grid_for(total), kThreads, 0, handle_of(h).stream>>>(batch, rows, cols, row0, n, src, dst);
  PCV_CUDA_CHECK_LAUNCH("scatter_add_rows_kernel");
}

void broadcast_rows(void* h, int64_t batch, int64_t n, const float* src, float* dst) {
  if (batch * n == 0) return;
  broadcast_rows_kernel<<<grid_for(batch * n), kThreads, 0, handle_of(h).stream>>>(batch, n, src, dst);
  PCV_CUDA_CHECK_LAUNCH("broadcast_rows_kernel");
}

void embed_forward(void* h, const EmbedDims& d, const EmbedArgs<float>& a, int64_t row0, int64_t n, float* x_rows) {
  const int64_t total = n * d.channels;
  if (total == 0) return;
  embed_forward_kernel<<<grid_for(total), kThreads, 0, handle_of(h).stream>>>(d, a, row0, n, x_rows);
  PCV_CUDA_CHECK_LAUNCH("embed_forward_kernel");
}

void embed_backward_rows(void* h, const EmbedDims& d, const uint8_t* mask, int64_t row0, int64_t n,
                         const float* dx_rows, const EmbedGrads<float>& g) {
  if (n == 0) return;
  CudaHandle& hh = handle_of(h);
  const int64_t blocks = (n + kRowBlock - 1) / kRowBlock, C = d.channels;
  double* partial = hh.ws->get<double>(Slot::kReduce, size_t(blocks * 6 * C));
  embed_backward_partials<<<grid_for(blocks * C), kThreads, 0, hh.stream>>>(d, mask, row0, n, dx_rows, blocks,
                                                                            partial);
  PCV_CUDA_CHECK_LAUNCH("embed_backward_partials");
  embed_backward_finish<<<grid_for(3 * C), kThreads, 0, hh.stream>>>(d, blocks, partial, g);
  PCV_CUDA_CHECK_LAUNCH("embed_backward_finish");
}

void queries_forward(void* h, const QueryDims& d, const QueryArgs<float>& a, float* q) {
  const int64_t total = d.batch * d.rows() * d.channels;
  if (total == 0) return;
  queries_forward_kernel<<<grid_for(total), kThreads, 0, handle_of(h).stream>>>(d, a, q);
  PCV_CUDA_CHECK_LAUNCH("queries_forward_kernel");
}

void queries_backward(void* h, const QueryDims& d, const float* dq, const QueryGrads<float>& g) {
  CudaHandle& hh = handle_of(h);
  const int64_t B = d.batch, O = d.rows(), E = d.channels, na = d.num_audio, ni = d.num_image;
  const int64_t wa = d.audio.width(), wi = d.image.width(), lc = d.label_channels;
  auto sum_rows = [&](int64_t row0, int64_t n, int64_t from, int64_t width, float* out) {
    if (n > 0) column_sum(hh, B * n, width, QueryRows{n, row0, from, O, E, dq}, out, "queries_backward");
  };
  sum_rows(0, na, wa, E - wa, g.pad_audio);
  sum_rows(na, ni, wi, E - wi, g.pad_image);
  sum_rows(O - 1, 1, lc, E - lc, g.pad_label);
  sum_rows(O - 1, 1, 0, lc, g.label_query);
}

void gather_targets(void* h, const TargetDims& d, const int64_t* image_points, const int64_t* audio_points,
                    const float* video, const float* audio, float* image_targets, float* audio_targets) {
  const int64_t total = d.batch * (d.num_image * 3 + d.num_audio * d.samples_per_patch);
  if (total == 0) return;
  gather_targets_kernel<<<grid_for(total), kThreads, 0, handle_of(h).stream>>>(d, image_points, audio_points, video,
                                                                               audio, image_targets, audio_targets);
  PCV_CUDA_CHECK_LAUNCH("gather_targets_kernel");
}

}  // namespace perceiver::cuda
