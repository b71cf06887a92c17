#include "backend/capture/lowering.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "perceiver/error.h"

namespace perceiver::capture {
namespace {

// Element ranges [begin, end) written so far in the region, merged.
class Intervals {
 public:
  void add(int64_t a, int64_t b) {
    if (a >= b) return;
    auto it = runs_.upper_bound(a);
    if (it != runs_.begin() && std::prev(it)->second >= a) {
      --it;
      a = it->first;
      b = std::max(b, it->second);
      it = runs_.erase(it);
    }
    while (it != runs_.end() && it->first <= b) {
      b = std::max(b, it->second);
      it = runs_.erase(it);
    }
    runs_[a] = b;
  }
  bool covers(int64_t a, int64_t b) const {
    if (a >= b) return true;
    auto it = runs_.upper_bound(a);
    if (it == runs_.begin()) return false;
    --it;
    return it->second >= b;
  }

 private:
  std::map<int64_t, int64_t> runs_;
};

// A view reduced to the dims that matter (extent > 1) with an innermost stride of 1.
struct Strided {
  Dims dims, strides;
};

Strided normalise(const Dims& dims, const Dims& strides) {
  Strided s;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != 1) s.dims.push_back(dims[i]), s.strides.push_back(strides[i]);
  if (s.dims.empty() || s.strides.back() != 1) s.dims.push_back(1), s.strides.push_back(1);
  return s;
}

bool dense(const Strided& v) {
  int64_t expect = 1;
  for (int64_t i = int64_t(v.dims.size()) - 1; i >= 0; --i) {
    if (v.strides[size_t(i)] != expect) return false;
    expect *= v.dims[size_t(i)];
  }
  return true;
}

Dims contiguous_strides(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (int64_t i = int64_t(dims.size()) - 2; i >= 0; --i) s[size_t(i)] = s[size_t(i) + 1] * dims[size_t(i) + 1];
  return s;
}

std::string hex64(uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;  // the FNV-1a 64 offset basis
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

struct Lowering::State {
  const BufferInfo* info = nullptr;
  int order = 0;  // first-touch order in the region: names do not depend on allocation ids
  Value cur;
  Intervals written;
  bool live_in = false, written_any = false;
  std::string entry() const { return "%b" + std::to_string(order); }
};

const ModuleArg* Module::arg(const std::string& n) const {
  for (const auto& a : args)
    if (a.name == n) return &a;
  return nullptr;
}

Lowering::Lowering(const Graph& g) : g_(g) {}

Lowering::State& Lowering::state(int32_t buffer) {
  auto it = states_.find(buffer);
  if (it != states_.end()) return *it->second;
  auto bi = g_.buffers.find(buffer);
  PCV_ASSERT(bi != g_.buffers.end() && bi->second.typed, "capture: buffer ", buffer, " unknown or untyped");
  auto s = std::make_unique<State>();
  s->info = &bi->second;
  s->order = int(owned_.size());
  s->cur = Value{s->entry(), {bi->second.elems()}, bi->second.elem};
  State* p = s.get();
  owned_.push_back(std::move(s));
  states_[buffer] = p;
  return *p;
}

Elem Lowering::elem(Ref r) const { return g_.buffers.at(r.buffer).elem; }
int64_t Lowering::elems(Ref r) const { return g_.buffers.at(r.buffer).elems(); }

// The flat range that holds a view, reshaped to [d0, s0/s1, ..., s_{k-2}/s_{k-1}]; the view is
// its leading [d0, d1, ...] corner. Reading marks the region's dependence on the entry value.
Value Lowering::box(State& s, int64_t offset, const Dims& dims, const Dims& strides, Dims& box_dims, bool mark_read) {
  const Strided v = normalise(dims, strides);
  const size_t k = v.dims.size();
  box_dims = {v.dims[0]};
  for (size_t i = 0; i + 1 < k; ++i) {
    PCV_CHECK(v.strides[i] % v.strides[i + 1] == 0 && v.strides[i] / v.strides[i + 1] >= v.dims[i + 1],
              "capture: a strided view (stride ", v.strides[i], " over ", v.dims[i + 1], " x stride ", v.strides[i + 1],
              ") of buffer ", s.info->id, " cannot be lowered as nested slices");
    box_dims.push_back(v.strides[i] / v.strides[i + 1]);
  }
  const int64_t len = numel(box_dims), elems = s.info->elems();
  PCV_CHECK((offset >= 0 && offset < elems) || len == 0, "capture: view at element ", offset, " outside buffer ",
            s.info->id, " of ", elems);
  if (mark_read && !s.live_in) {
    // Each innermost run must have been written in the region, else the entry value is needed.
    int64_t runs = 1;
    for (size_t i = 0; i + 1 < k; ++i) runs *= v.dims[i];
    if (runs > 4096) {
      int64_t last = offset;
      for (size_t i = 0; i < k; ++i) last += (v.dims[i] - 1) * v.strides[i];
      s.live_in = !s.written.covers(offset, last + 1);
    } else {
      for (int64_t r = 0; r < runs && !s.live_in; ++r) {
        int64_t at = offset, rest = r;
        for (int64_t i = int64_t(k) - 2; i >= 0; --i) {
          at += (rest % v.dims[size_t(i)]) * v.strides[size_t(i)];
          rest /= v.dims[size_t(i)];
        }
        s.live_in = !s.written.covers(at, at + v.dims[k - 1]);
      }
    }
  }
  const Value padded = w.pad(s.cur, {0}, {std::max<int64_t>(0, offset + len - elems)});
  return w.reshape(w.slice(padded, {offset}, {offset + len}), box_dims);
}

Value Lowering::read(Ref r, const Dims& dims, Dims strides) {
  if (strides.empty()) strides = contiguous_strides(dims);
  State& s = state(r.buffer);
  Dims box_dims;
  const Value b = box(s, r.offset, dims, strides, box_dims, true);
  const Strided v = normalise(dims, strides);
  const Value corner = w.slice(b, Dims(box_dims.size(), 0), v.dims);
  return w.reshape(corner, dims);
}

void Lowering::write(Ref r, const Dims& dims, const Value& val, Dims strides) {
  PCV_ASSERT(numel(val.shape) == numel(dims), "capture: write of ", val.type(), " into ", dims.size(), " dims");
  if (strides.empty()) strides = contiguous_strides(dims);
  State& s = state(r.buffer);
  PCV_CHECK(val.elem == s.info->elem, "capture: buffer ", s.info->id, " holds ", elem_name(s.info->elem),
            " but an op writes ", elem_name(val.elem));
  const Strided v = normalise(dims, strides);
  const int64_t elems = s.info->elems();
  Value flat;
  int64_t len = 0;
  if (dense(v)) {
    flat = w.reshape(val, {numel(dims)});  // contiguous: no old values needed
    len = numel(dims);
  } else {
    Dims box_dims;
    const Value b = box(s, r.offset, dims, strides, box_dims, false);
    const Value updated = w.update_slice(b, w.reshape(val, v.dims), Dims(box_dims.size(), 0));
    len = numel(box_dims);
    flat = w.reshape(updated, {len});
  }
  const int64_t over = std::max<int64_t>(0, r.offset + len - elems);
  const Value padded = w.pad(s.cur, {0}, {over});
  s.cur = w.slice(w.update_slice(padded, flat, {r.offset}), {0}, {elems});
  // Record the written runs.
  int64_t runs = 1;
  for (size_t i = 0; i + 1 < v.dims.size(); ++i) runs *= v.dims[i];
  if (dense(v)) {
    s.written.add(r.offset, r.offset + numel(v.dims));
  } else if (runs <= 4096) {
    for (int64_t q = 0; q < runs; ++q) {
      int64_t at = r.offset, rest = q;
      for (int64_t i = int64_t(v.dims.size()) - 2; i >= 0; --i) {
        at += (rest % v.dims[size_t(i)]) * v.strides[size_t(i)];
        rest /= v.dims[size_t(i)];
      }
      s.written.add(at, at + v.dims.back());
    }
  }  // else: not recorded; a later read then takes the entry value too (correct, one more argument)
  s.written_any = true;
}

Value Lowering::scalar(const std::string& name, double value) {
  auto it = scalars_.find(name);
  if (it != scalars_.end()) {
    PCV_CHECK(args_[size_t(it->second)].value == value, "capture: host scalar '", name,
              "' has two values in one region (", args_[size_t(it->second)].value, " and ", value, ")");
    return Value{"%" + name, {}, Elem::kF64};
  }
  ModuleArg a;
  a.kind = ModuleArg::Kind::kScalar;
  a.name = name;
  a.elem = Elem::kF64;
  a.elems = 1;
  a.value = value;
  scalars_[name] = int(args_.size());
  args_.push_back(a);
  return Value{"%" + name, {}, Elem::kF64};
}

void Lowering::host_write(int node_index, const Node& n) {
  const BufferInfo& b = g_.buffers.at(n.buffer);
  if (!b.typed) return;  // no op ever looks at it
  const size_t eb = elem_bytes(b.elem);
  PCV_CHECK(n.byte_offset % eb == 0 && n.bytes % eb == 0, "capture: host write of ", n.bytes, " bytes at ",
            n.byte_offset, " into a buffer of ", elem_name(b.elem));
  ModuleArg a;
  a.kind = ModuleArg::Kind::kInput;
  a.name = "in" + std::to_string(node_index);
  a.buffer = n.buffer;
  a.byte_offset = n.byte_offset;
  a.elem = b.elem;
  a.elems = int64_t(n.bytes / eb);
  a.node = node_index;
  args_.push_back(a);
  write(Ref{n.buffer, int64_t(n.byte_offset / eb)}, {a.elems}, Value{"%" + a.name, {a.elems}, a.elem});
}

void Lowering::zero(const Node& n) {
  const BufferInfo& b = g_.buffers.at(n.buffer);
  if (!b.typed) return;
  const size_t eb = elem_bytes(b.elem);
  const int64_t count = int64_t(n.bytes / eb);
  if (count == 0) return;
  write(Ref{n.buffer, int64_t(n.byte_offset / eb)}, {count}, w.constant(0, b.elem, {count}));
}

void Lowering::host_read(const Node& n) {
  const BufferInfo& b = g_.buffers.at(n.buffer);
  if (!b.typed) return;
  const size_t eb = elem_bytes(b.elem);
  ModuleResult r;
  r.kind = ModuleResult::Kind::kHostRead;
  r.name = "read" + std::to_string(results_.size());
  r.buffer = n.buffer;
  r.byte_offset = n.byte_offset;
  r.elem = b.elem;
  r.elems = int64_t(n.bytes / eb);
  results_.push_back(r);
  result_values_.push_back(read(Ref{n.buffer, int64_t(n.byte_offset / eb)}, {r.elems}));
}

Module Lowering::finish(const std::string& name) {
  // State: written buffers that are named or whose entry value was read; in place when read.
  std::vector<ModuleArg> buffer_args;
  for (const auto& s : owned_) {
    const bool state = s->written_any && (!s->info->name.empty() || s->live_in);
    if (s->live_in) {
      ModuleArg a;
      a.kind = s->written_any ? ModuleArg::Kind::kState : ModuleArg::Kind::kResident;
      a.name = s->entry().substr(1);
      a.buffer = s->info->id;
      a.elem = s->info->elem;
      a.elems = s->info->elems();
      a.host_written = std::find(g_.host_written.begin(), g_.host_written.end(), a.buffer) != g_.host_written.end();
      buffer_args.push_back(a);
    }
    if (!state) continue;
    ModuleResult r;
    r.kind = ModuleResult::Kind::kState;
    r.name = s->info->name.empty() ? s->entry().substr(1) : s->info->name;
    r.buffer = s->info->id;
    r.elem = s->info->elem;
    r.elems = s->info->elems();
    results_.push_back(r);
    result_values_.push_back(s->cur);
  }
  Module m;
  m.name = name;
  m.args = buffer_args;
  m.args.insert(m.args.end(), args_.begin(), args_.end());
  m.results = results_;
  for (size_t ri = 0; ri < m.results.size(); ++ri) {
    if (m.results[ri].kind != ModuleResult::Kind::kState) continue;
    for (size_t ai = 0; ai < m.args.size(); ++ai)
      if (m.args[ai].kind == ModuleArg::Kind::kState && m.args[ai].buffer == m.results[ri].buffer) {
        m.args[ai].alias_result = int(ri);
        m.results[ri].alias_arg = int(ai);
      }
  }
  std::ostringstream t;
  t << "module @perceiver_step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
    << "  func.func public @main(";
  for (size_t i = 0; i < m.args.size(); ++i) {
    const ModuleArg& a = m.args[i];
    const Value v{"%" + a.name, a.kind == ModuleArg::Kind::kScalar ? Dims{} : Dims{a.elems}, a.elem};
    t << (i ? ", " : "") << v.name << ": " << v.type();
    if (a.alias_result >= 0) t << " {tf.aliasing_output = " << a.alias_result << " : i32}";
  }
  t << ") -> (";
  for (size_t i = 0; i < result_values_.size(); ++i) t << (i ? ", " : "") << result_values_[i].type();
  t << ") {\n";
  for (const auto& s : owned_) {
    if (s->live_in) continue;  // else its entry value is zeros (fresh memory the region fills)
    const std::string type = Value{"", {s->info->elems()}, s->info->elem}.type();
    const bool fp = s->info->elem == Elem::kF32 || s->info->elem == Elem::kF64;
    t << "    " << s->entry() << " = \"stablehlo.constant\"() {value = dense<" << (fp ? "0.0" : "0") << "> : " << type
      << "} : () -> " << type << "\n";
  }
  t << w.body() << "    \"func.return\"(";
  for (size_t i = 0; i < result_values_.size(); ++i) t << (i ? ", " : "") << result_values_[i].name;
  t << ") : (";
  for (size_t i = 0; i < result_values_.size(); ++i) t << (i ? ", " : "") << result_values_[i].type();
  t << ") -> ()\n  }\n}\n";
  m.text = t.str();
  m.hash = hex64(fnv1a(m.text));
  return m;
}

Module lower(const Graph& g) {
  Lowering l(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    switch (n.kind) {
      case Node::Kind::kOp: n.lower(l); break;
      case Node::Kind::kHostWrite: l.host_write(int(i), n); break;
      case Node::Kind::kZero: l.zero(n); break;
      case Node::Kind::kHostRead: l.host_read(n); break;
    }
  }
  return l.finish(g.name);
}

size_t Graph::op_count() const {
  size_t n = 0;
  for (const Node& x : nodes) n += x.kind == Node::Kind::kOp;
  return n;
}

}  // namespace perceiver::capture
