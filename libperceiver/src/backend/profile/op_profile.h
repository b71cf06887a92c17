// Where a step's time goes, for any backend: a copy of its op table with every op timed, the
// times summed by op and shape (GEMMs by transposes and m×n×k, attention by B, H, queries ×
// keys, row ops by rows × cols) and printed as a table on stderr when the process exits.
// A backend supplies a Timer: which table it wraps (`inner`), how it times one call (`time`:
// wall-clock for the CPU, events waited for on the stream for a GPU) and the table's title.
// For finding where the time goes, not for timing a step: a GPU timer serialises host and device.
#pragma once

#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "perceiver/backend.h"

namespace perceiver::profile {

/// Every op a table may have: PCV_KERNEL_OPS and the optional ones.
#define PCV_PROFILED_OPS(X) \
  PCV_KERNEL_OPS(X) X(store_bf16) X(load_bf16) X(gemm_stored_bf16) X(scale_columns) X(column_dots) \
      X(attention_backward_key_sums) X(embed_layer_norm_forward) X(embed_norm_factors) X(embed_factor_matrix)

enum OpIndex : int {
#define PCV_PROFILE_OP_INDEX(op) k_##op,
  PCV_PROFILED_OPS(PCV_PROFILE_OP_INDEX)
#undef PCV_PROFILE_OP_INDEX
};

/// Whether the environment variable `name` is set to something other than "" or "0".
bool requested(const char* name);

/// Times summed by key; prints them, largest first, under `title` when destroyed (at exit).
class OpTotals {
 public:
  struct Total {
    std::string key;
    int64_t calls = 0;
    double ms = 0;
  };
  explicit OpTotals(std::string title) : title_(std::move(title)) {}
  OpTotals(const OpTotals&) = delete;
  OpTotals& operator=(const OpTotals&) = delete;
  ~OpTotals();
  void add(const std::string& key, double ms);
  /// The totals so far, largest time first.
  std::vector<Total> rows() const;

 private:
  std::string title_;
  mutable std::mutex mu_;
  std::vector<Total> totals_;  // few distinct keys: a linear search is cheaper than a map's
};

// The key's shape part for each kind of op; the op's name alone for the rest.
std::string gemm_key(const char* op, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k);
std::string attention_key(const char* op, const AttentionDims& d);
std::string rows_key(const char* op, int64_t rows, int64_t cols);
const char* op_name(int index);

template <int Index, class Args>
std::string key_of(const Args& a) {
  const char* name = op_name(Index);
  if constexpr (Index == k_gemm || Index == k_gemm_stored_bf16) {
    return gemm_key(name, std::get<0>(a), std::get<1>(a), std::get<2>(a), std::get<3>(a), std::get<4>(a));
  } else if constexpr (Index == k_gemm_batched) {
    return gemm_key(name, std::get<0>(a), std::get<1>(a), std::get<2>(a), std::get<3>(a), std::get<4>(a)) +
           " batch=" + std::to_string(std::get<16>(a));
  } else if constexpr (Index == k_attention_forward || Index == k_attention_backward ||
                       Index == k_attention_backward_key_sums) {
    return attention_key(name, std::get<0>(a));
  } else if constexpr (Index == k_layer_norm_forward || Index == k_layer_norm_backward ||
                       Index == k_softmax_forward || Index == k_softmax_backward ||
                       Index == k_bias_forward || Index == k_bias_backward || Index == k_store_bf16 ||
                       Index == k_scale_columns || Index == k_column_dots ||
                       Index == k_load_bf16) {
    return rows_key(name, std::get<0>(a), std::get<1>(a));
  } else if constexpr (Index == k_embed_layer_norm_forward || Index == k_embed_norm_factors) {
    return rows_key(name, std::get<3>(a), std::get<0>(a).channels);
  } else {
    return name;
  }
}

template <class Timer>
OpTotals& totals() {
  static OpTotals t(Timer::kTitle);
  return t;
}

// The timed form of one slot of Timer's table.
template <int Index, class Timer, class Table, auto Member>
struct Timed;
template <int Index, class Timer, class Table, class... A, void (*Table::*Member)(void*, A...)>
struct Timed<Index, Timer, Table, Member> {
  static void call(void* h, A... a) {
    const double ms = Timer::time(h, [&] { (Timer::inner().*Member)(h, a...); });
    totals<Timer>().add(key_of<Index>(std::forward_as_tuple(a...)), ms);
  }
};

/// Timer::inner() with every op it has timed (an op it lacks stays null).
template <class Timer>
KernelTable<float> timed_table() {
  using Table = KernelTable<float>;
  Table t;
#define PCV_PROFILE_WRAP(op) \
  if (Timer::inner().op) t.op = &Timed<k_##op, Timer, Table, &Table::op>::call;
  PCV_PROFILED_OPS(PCV_PROFILE_WRAP)
#undef PCV_PROFILE_WRAP
  return t;
}

}  // namespace perceiver::profile
