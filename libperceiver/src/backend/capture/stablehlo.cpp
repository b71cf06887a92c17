#include "backend/capture/stablehlo.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "perceiver/error.h"

namespace perceiver::capture {

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::kF32: return "f32";
    case Elem::kF64: return "f64";
    case Elem::kI64: return "i64";
    case Elem::kI32: return "i32";
    case Elem::kU8: return "ui8";
    case Elem::kI1: return "i1";
  }
  return "?";
}

size_t elem_bytes(Elem e) {
  switch (e) {
    case Elem::kF64:
    case Elem::kI64: return 8;
    case Elem::kF32:
    case Elem::kI32: return 4;
    case Elem::kU8:
    case Elem::kI1: return 1;
  }
  return 0;
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

std::string Value::type() const {
  std::string s = "tensor<";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + elem_name(elem) + ">";
}

std::string i64_array(const Dims& d) {
  std::string s = "array<i64";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : ": ") + std::to_string(d[i]);
  return s + ">";
}

namespace {

// "[0, 1]" for the attribute lists of dot and gather dimension numbers.
std::string list(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

bool is_float(Elem e) { return e == Elem::kF32 || e == Elem::kF64; }

// A literal MLIR reads back to the same bits: floats as their IEEE hex pattern.
std::string literal(double v, Elem e) {
  char buf[40];
  if (e == Elem::kF32) {
    const float f = float(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    std::snprintf(buf, sizeof buf, "0x%08" PRIX32, bits);
  } else if (e == Elem::kF64) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    std::snprintf(buf, sizeof buf, "0x%016" PRIX64, bits);
  } else if (e == Elem::kI1) {
    return v != 0 ? "true" : "false";
  } else {
    std::snprintf(buf, sizeof buf, "%" PRId64, int64_t(v));
  }
  return buf;
}

}  // namespace

Value HloWriter::emit(const std::string& op, const std::vector<Value>& operands, const std::string& attrs,
                      const Dims& shape, Elem e) {
  Value r{fresh(), shape, e};
  body_ << "    " << r.name << " = \"" << op << "\"(";
  for (size_t i = 0; i < operands.size(); ++i) body_ << (i ? ", " : "") << operands[i].name;
  body_ << ")";
  if (!attrs.empty()) body_ << " {" << attrs << "}";
  body_ << " : (";
  for (size_t i = 0; i < operands.size(); ++i) body_ << (i ? ", " : "") << operands[i].type();
  body_ << ") -> " << r.type() << "\n";
  return r;
}

Value HloWriter::constant(double v, Elem e, const Dims& shape) {
  Value proto{"", shape, e};
  const std::string attr = "value = dense<" + literal(v, e) + "> : " + proto.type();
  auto it = constants_.find(attr);  // one op per distinct constant: shorter text, faster compiles
  if (it != constants_.end()) return it->second;
  return constants_[attr] = emit("stablehlo.constant", {}, attr, shape, e);
}

Value HloWriter::index_constant(int64_t v) { return constant(double(v), Elem::kI64); }

Value HloWriter::iota(const Dims& shape, int64_t dim, Elem e) {
  return emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(dim) + " : i64", shape, e);
}

Value HloWriter::reshape(const Value& a, const Dims& shape) {
  PCV_ASSERT(numel(a.shape) == numel(shape), "reshape of ", a.type(), " to ", shape.size(), " dims");
  if (a.shape == shape) return a;
  return emit("stablehlo.reshape", {a}, "", shape, a.elem);
}

Value HloWriter::broadcast(const Value& a, const Dims& shape, const Dims& dims) {
  PCV_ASSERT(dims.size() == a.shape.size(), "broadcast of ", a.type());
  if (a.shape == shape) return a;
  return emit("stablehlo.broadcast_in_dim", {a}, "broadcast_dimensions = " + i64_array(dims), shape, a.elem);
}

Value HloWriter::transpose(const Value& a, const Dims& perm) {
  Dims shape;
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) {
    shape.push_back(a.shape[size_t(perm[i])]);
    identity = identity && perm[i] == int64_t(i);
  }
  if (identity) return a;
  return emit("stablehlo.transpose", {a}, "permutation = " + i64_array(perm), shape, a.elem);
}

Value HloWriter::slice(const Value& a, const Dims& start, const Dims& limit) {
  Dims shape;
  bool whole = true;
  for (size_t i = 0; i < start.size(); ++i) {
    PCV_ASSERT(start[i] >= 0 && start[i] <= limit[i] && limit[i] <= a.shape[i], "slice out of ", a.type());
    shape.push_back(limit[i] - start[i]);
    whole = whole && start[i] == 0 && limit[i] == a.shape[i];
  }
  if (whole) return a;
  return emit("stablehlo.slice", {a},
              "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                  ", strides = " + i64_array(Dims(start.size(), 1)),
              shape, a.elem);
}

Value HloWriter::pad(const Value& a, const Dims& low, const Dims& high, double value) {
  Dims shape;
  bool none = true;
  for (size_t i = 0; i < a.shape.size(); ++i) {
    shape.push_back(a.shape[i] + low[i] + high[i]);
    none = none && low[i] == 0 && high[i] == 0;
  }
  if (none) return a;
  const Value v = constant(value, a.elem);
  return emit("stablehlo.pad", {a, v},
              "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                  ", interior_padding = " + i64_array(Dims(a.shape.size(), 0)),
              shape, a.elem);
}

Value HloWriter::concat(const std::vector<Value>& parts, int64_t dim) {
  std::vector<Value> nonempty;
  for (const Value& p : parts)
    if (p.shape[size_t(dim)] > 0) nonempty.push_back(p);
  PCV_ASSERT(!nonempty.empty(), "concatenation of nothing");
  if (nonempty.size() == 1) return nonempty[0];
  Dims shape = nonempty[0].shape;
  shape[size_t(dim)] = 0;
  for (const Value& p : nonempty) shape[size_t(dim)] += p.shape[size_t(dim)];
  return emit("stablehlo.concatenate", nonempty, "dimension = " + std::to_string(dim) + " : i64", shape,
              nonempty[0].elem);
}

Value HloWriter::update_slice(const Value& a, const Value& update, const Dims& start) {
  if (update.shape == a.shape) return update;
  std::vector<Value> ops{a, update};
  for (int64_t s : start) ops.push_back(index_constant(s));
  return emit("stablehlo.dynamic_update_slice", ops, "", a.shape, a.elem);
}

Value HloWriter::convert(const Value& a, Elem e) {
  if (a.elem == e) return a;
  return emit("stablehlo.convert", {a}, "", a.shape, e);
}

Value HloWriter::take_rows(const Value& table, const Value& idx) {
  PCV_ASSERT(idx.shape.size() == 1 && !table.shape.empty(), "take_rows of ", table.type(), " by ", idx.type());
  const Value index = reshape(idx, {idx.shape[0], 1});
  Dims shape = table.shape, sizes = table.shape, offset_dims;
  shape[0] = idx.shape[0];
  sizes[0] = 1;
  for (size_t i = 1; i < table.shape.size(); ++i) offset_dims.push_back(int64_t(i));
  return emit("stablehlo.gather", {table, index},
              "dimension_numbers = #stablehlo.gather<offset_dims = " + list(offset_dims) +
                  ", collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = " +
                  i64_array(sizes) + ", indices_are_sorted = false",
              shape, table.elem);
}

Value HloWriter::binary(const char* op, const Value& a, const Value& b) {
  PCV_ASSERT(a.shape == b.shape && a.elem == b.elem, "stablehlo.", op, " of ", a.type(), " and ", b.type());
  return emit(std::string("stablehlo.") + op, {a, b}, "", a.shape, a.elem);
}

Value HloWriter::unary(const char* op, const Value& a) { return emit(std::string("stablehlo.") + op, {a}, "", a.shape, a.elem); }

Value HloWriter::erf(const Value& a) { return emit("chlo.erf", {a}, "", a.shape, a.elem); }

Value HloWriter::compare(const char* dir, const Value& a, const Value& b) {
  PCV_ASSERT(a.shape == b.shape && a.elem == b.elem, "compare of ", a.type(), " and ", b.type());
  std::string attrs = std::string("comparison_direction = #stablehlo<comparison_direction ") + dir + ">";
  if (is_float(a.elem)) attrs += ", compare_type = #stablehlo<comparison_type FLOAT>";
  return emit("stablehlo.compare", {a, b}, attrs, a.shape, Elem::kI1);
}

Value HloWriter::select(const Value& pred, const Value& a, const Value& b) {
  PCV_ASSERT(a.shape == b.shape && a.elem == b.elem, "select of ", a.type(), " and ", b.type());
  const Value p = pred.shape == a.shape ? pred : splat(pred, a.shape);
  return emit("stablehlo.select", {p, a, b}, "", a.shape, a.elem);
}

Value HloWriter::is_finite(const Value& a) { return emit("stablehlo.is_finite", {a}, "", a.shape, Elem::kI1); }

Value HloWriter::dot(const Value& a, const Value& b, const Dims& batch_a, const Dims& batch_b, const Dims& contract_a,
                     const Dims& contract_b) {
  Dims shape;
  for (int64_t d : batch_a) shape.push_back(a.shape[size_t(d)]);
  auto free_dims = [&](const Value& v, const Dims& batch, const Dims& contract) {
    for (int64_t i = 0; i < int64_t(v.shape.size()); ++i) {
      bool used = false;
      for (int64_t d : batch) used = used || d == i;
      for (int64_t d : contract) used = used || d == i;
      if (!used) shape.push_back(v.shape[size_t(i)]);
    }
  };
  free_dims(a, batch_a, contract_a);
  free_dims(b, batch_b, contract_b);
  // HIGHEST: full float32 products on every backend (no implicit bf16 passes).
  return emit("stablehlo.dot_general", {a, b},
              "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " + list(batch_a) +
                  ", rhs_batching_dimensions = " + list(batch_b) + ", lhs_contracting_dimensions = " +
                  list(contract_a) + ", rhs_contracting_dimensions = " + list(contract_b) +
                  ">, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
              shape, a.elem);
}

Value HloWriter::reduce(const Value& a, const Dims& dims, const char* op) {
  const bool is_max = std::strcmp(op, "maximum") == 0;
  const double init = is_max ? -__builtin_huge_val() : 0.0;
  const Value init_v = constant(init, a.elem);
  Dims shape;
  for (int64_t i = 0; i < int64_t(a.shape.size()); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced = reduced || d == i;
    if (!reduced) shape.push_back(a.shape[size_t(i)]);
  }
  const Value r{fresh(), shape, a.elem};
  const Value scalar{"", {}, a.elem};
  const std::string x = fresh(), y = fresh(), z = fresh();
  body_ << "    " << r.name << " = \"stablehlo.reduce\"(" << a.name << ", " << init_v.name << ") ({\n"
        << "    ^bb0(" << x << ": " << scalar.type() << ", " << y << ": " << scalar.type() << "):\n"
        << "      " << z << " = \"stablehlo." << op << "\"(" << x << ", " << y << ") : (" << scalar.type() << ", "
        << scalar.type() << ") -> " << scalar.type() << "\n"
        << "      \"stablehlo.return\"(" << z << ") : (" << scalar.type() << ") -> ()\n"
        << "    }) {dimensions = " << i64_array(dims) << "} : (" << a.type() << ", " << init_v.type() << ") -> "
        << r.type() << "\n";
  return r;
}

}  // namespace perceiver::capture
