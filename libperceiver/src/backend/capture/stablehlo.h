// A small writer of StableHLO in MLIR's generic text form: every op as
//   %N = "stablehlo.op"(%a, %b) {attributes} : (operand types) -> result type
// which the MLIR parser of any XLA (jaxlib, neuronx-cc's front end) accepts without depending
// on each op's pretty syntax. Values are tensors of static shape; scalars have shape {}.
// Only what the capture lowering needs is here; every method appends one op and returns its value.
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace perceiver::capture {

enum class Elem { kF32, kF64, kI64, kI32, kU8, kI1 };
const char* elem_name(Elem e);  // "f32", "f64", "i64", "i32", "ui8", "i1"
size_t elem_bytes(Elem e);

using Dims = std::vector<int64_t>;
int64_t numel(const Dims& d);

struct Value {
  std::string name;  // "%12" or a function argument
  Dims shape;
  Elem elem = Elem::kF32;
  std::string type() const;  // tensor<2x3xf32>
};

class HloWriter {
 public:
  /// The ops written so far, one per line.
  std::string body() const { return body_.str(); }

  // ---- constants and shapes --------------------------------------------------------------
  Value constant(double v, Elem e, const Dims& shape = {});  // splat; floats written bit-exactly
  Value iota(const Dims& shape, int64_t dim, Elem e);
  Value reshape(const Value& a, const Dims& shape);
  Value broadcast(const Value& a, const Dims& shape, const Dims& dims);  // broadcast_in_dim
  Value splat(const Value& scalar, const Dims& shape) { return broadcast(scalar, shape, {}); }
  Value transpose(const Value& a, const Dims& perm);
  Value slice(const Value& a, const Dims& start, const Dims& limit);
  Value pad(const Value& a, const Dims& low, const Dims& high, double value = 0);
  Value concat(const std::vector<Value>& parts, int64_t dim);
  Value update_slice(const Value& a, const Value& update, const Dims& start);  // dynamic_update_slice
  Value convert(const Value& a, Elem e);
  /// Rows of `table` [R, W...] picked by runtime indices `idx` [P] (any integer type): [P, W...].
  Value take_rows(const Value& table, const Value& idx);

  // ---- arithmetic ------------------------------------------------------------------------
  Value binary(const char* op, const Value& a, const Value& b);  // add, subtract, multiply, ...
  Value unary(const char* op, const Value& a);                   // exponential, log, sqrt, ...
  Value add(const Value& a, const Value& b) { return binary("add", a, b); }
  Value sub(const Value& a, const Value& b) { return binary("subtract", a, b); }
  Value mul(const Value& a, const Value& b) { return binary("multiply", a, b); }
  Value div(const Value& a, const Value& b) { return binary("divide", a, b); }
  Value max(const Value& a, const Value& b) { return binary("maximum", a, b); }
  Value erf(const Value& a);  // chlo.erf (XLA expands it; HLO has an erf op)
  Value compare(const char* dir, const Value& a, const Value& b);  // EQ, NE, LT, LE, GT, GE
  Value select(const Value& pred, const Value& a, const Value& b);
  Value is_finite(const Value& a);
  Value dot(const Value& a, const Value& b, const Dims& batch_a, const Dims& batch_b, const Dims& contract_a,
            const Dims& contract_b);
  /// Sum ("add") or maximum ("maximum") over `dims`.
  Value reduce(const Value& a, const Dims& dims, const char* op);

 private:
  Value emit(const std::string& op, const std::vector<Value>& operands, const std::string& attrs, const Dims& shape,
             Elem e);
  std::string fresh() { return "%" + std::to_string(next_++); }
  Value index_constant(int64_t v);

  std::ostringstream body_;
  int next_ = 0;
  std::map<std::string, Value> constants_;  // by their attribute text
};

/// "array<i64: 1, 2>"
std::string i64_array(const Dims& d);

}  // namespace perceiver::capture
