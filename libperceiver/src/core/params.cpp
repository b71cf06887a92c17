#include "core/params.h"

#include <cmath>

#include "core/rng.h"
#include "perceiver/error.h"

namespace perceiver {

bool is_decayed(ParamRole role) {
  return role != ParamRole::kBias && role != ParamRole::kNormGain && role != ParamRole::kNormBias;
}

std::vector<ParamSpec> prefixed(std::vector<ParamSpec> specs, std::string_view prefix) {
  for (auto& s : specs) s.name = std::string(prefix) + s.name;
  return specs;
}

void ParamRegistry::add(const ParamSpec& spec) {
  PCV_ASSERT(!contains(spec.name), "parameter '", spec.name, "' registered twice");
  const int64_t align = ArenaPlan::kAlignElems;
  const int64_t offset = (size_ + align - 1) / align * align;
  index_.emplace(spec.name, entries_.size());
  entries_.push_back({spec, offset});
  size_ = offset + spec.shape.numel();
}

void ParamRegistry::add(const std::vector<ParamSpec>& specs, std::string_view prefix) {
  for (const auto& s : prefixed(specs, prefix)) add(s);
}

const ParamRegistry::Entry& ParamRegistry::at(std::string_view name) const {
  auto it = index_.find(name);
  PCV_CHECK(it != index_.end(), "no parameter named '", name, "'");
  return entries_[it->second];
}

bool ParamRegistry::contains(std::string_view name) const { return index_.find(name) != index_.end(); }

int64_t ParamRegistry::first_offset(std::string_view prefix) const {
  for (const auto& e : entries_)  // registered in arena order: the first match is the lowest
    if (std::string_view(e.spec.name).substr(0, prefix.size()) == prefix) return e.offset;
  PCV_FAIL("no parameter named '", prefix, "...'");
}

int64_t ParamRegistry::num_parameters() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += e.spec.shape.numel();
  return n;
}

namespace {

// Haiku's VarianceScaling(1, fan_in, truncated_normal) divides by the std of a unit normal
// truncated to [-2, 2], so the realised std is exactly 1/sqrt(fan_in).
constexpr double kTruncatedStd = 0.87962566103423978;

double draw(RngStream& rng, ParamRole role, int64_t fan_in, InitScheme scheme) {
  switch (role) {
    case ParamRole::kBias:
    case ParamRole::kNormBias: return 0.0;
    case ParamRole::kNormGain: return 1.0;
    default: break;
  }
  if (scheme == InitScheme::kHuggingFace) return 0.02 * rng.normal();
  if (role == ParamRole::kEmbedding) return 0.02 * rng.truncated_normal();
  PCV_ASSERT(fan_in > 0, "variance-scaling init needs fan_in");
  const double s = 1.0 / std::sqrt(double(fan_in));
  return rng.truncated_normal() * (role == ParamRole::kLinearWeight ? s / kTruncatedStd : s);
}

}  // namespace

template <class T>
void ParamStore<T>::initialize(uint64_t seed, InitScheme scheme) {
  std::vector<T> host(params_.size(), T(0));  // drawn on the host, uploaded once
  for (const auto& e : registry_.entries()) {
    RngStream rng(seed, RngPurpose::kInit, hash32(e.spec.name));
    T* p = host.data() + e.offset;
    for (int64_t i = 0; i < e.spec.shape.numel(); ++i) p[i] = T(draw(rng, e.spec.role, e.spec.fan_in, scheme));
  }
  params_.upload(host.data(), host.size());
}

template class ParamStore<float>;
template class ParamStore<double>;

}  // namespace perceiver
