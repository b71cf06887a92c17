#include "backend/profile/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace perceiver::profile {
namespace {

constexpr const char* kOpNames[] = {
#define PCV_PROFILE_OP_NAME(op) #op,
    PCV_PROFILED_OPS(PCV_PROFILE_OP_NAME)
#undef PCV_PROFILE_OP_NAME
};

const char* t_name(Transpose t) { return t == Transpose::kYes ? "T" : "N"; }

}  // namespace

bool requested(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

const char* op_name(int index) { return kOpNames[index]; }

std::string gemm_key(const char* op, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %s%s m=%lld n=%lld k=%lld", op, t_name(ta), t_name(tb),
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
  return buf;
}

std::string attention_key(const char* op, const AttentionDims& d) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s B=%lld H=%lld nq=%lld nk=%lld%s%s", op, static_cast<long long>(d.batch),
                static_cast<long long>(d.heads), static_cast<long long>(d.nq), static_cast<long long>(d.nk),
                d.streamed() ? " streamed" : "", d.dropout() ? " dropout" : "");
  return buf;
}

std::string rows_key(const char* op, int64_t rows, int64_t cols) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %lldx%lld", op, static_cast<long long>(rows), static_cast<long long>(cols));
  return buf;
}

void OpTotals::add(const std::string& key, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(totals_.begin(), totals_.end(), [&](const Total& t) { return t.key == key; });
  if (it == totals_.end()) it = totals_.insert(totals_.end(), Total{key});
  ++it->calls, it->ms += ms;
}

std::vector<OpTotals::Total> OpTotals::rows() const {
  std::vector<Total> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rows = totals_;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Total& a, const Total& b) { return a.ms > b.ms; });
  return rows;
}

OpTotals::~OpTotals() {
  const std::vector<Total> rows = this->rows();
  if (rows.empty()) return;
  double all = 0;
  for (const Total& r : rows) all += r.ms;
  std::fprintf(stderr, "\n%s\n", title_.c_str());
  std::fprintf(stderr, "%10s %6s %9s %10s  %s\n", "ms", "%", "calls", "us/call", "op");
  for (const Total& r : rows)
    std::fprintf(stderr, "%10.2f %6.2f %9lld %10.1f  %s\n", r.ms, all > 0 ? 100 * r.ms / all : 0.0,
                 static_cast<long long>(r.calls), 1000 * r.ms / double(r.calls), r.key.c_str());
  std::fprintf(stderr, "%10.2f %6.2f %9s %10s  all ops\n", all, 100.0, "", "");
}

}  // namespace perceiver::profile
