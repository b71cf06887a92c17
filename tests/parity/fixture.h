// Parity-test plumbing: run a PyTorch generator (tests/reference/*.py), read its HDF5 fixture by
// name with the HDF5 C API, and compare C++ results elementwise with |got − ref| ≤ atol +
// rtol·|ref| (llm.c check_tensor, torch's parity harness; STYLE.md §7).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "perceiver/tensor.h"

namespace perceiver::parity {

/// A tensor read from a fixture, converted to float, with the dataset's shape.
struct RefTensor {
  std::vector<float> data;
  Shape shape;
  ConstView<float> view() const { return {data.data(), shape}; }
};

/// A fixture file opened read-only. Every failure throws perceiver::Error naming file and path.
class Fixture {
 public:
  explicit Fixture(std::string path);
  ~Fixture();
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  const std::string& path() const { return path_; }
  RefTensor floats(const std::string& dataset) const;
  std::vector<int64_t> ints(const std::string& dataset) const;
  /// Member names of a group, sorted (HDF5 name order).
  std::vector<std::string> names(const std::string& group) const;
  int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;
  std::string attr_string(const std::string& name) const;

 private:
  int64_t file_ = -1;  // hid_t (int64_t since HDF5 1.10)
  std::string path_;
};

struct Tolerance {
  double atol = 0, rtol = 0;
};

/// Elementwise comparison. Prints one line per tensor (max abs error, max relative error with
/// |ref| floored at atol/rtol, and the largest fraction of the tolerance used) and, on failure,
/// the first mismatches. Fails on a shape mismatch or any element above tolerance.
::testing::AssertionResult tensors_close(const std::string& name, ConstView<float> got,
                                         const RefTensor& ref, Tolerance tol);

/// Runs `PERCEIVER_PYTHON tests/reference/<script> --out <binary dir>/<subdir> --seed <seed>`
/// unless a stamp in that directory shows a run with this seed since the script last changed,
/// and returns the directory. Throws (naming the interpreter) when the generator fails, e.g.
/// because PyTorch is missing; a process remembers the failure rather than retrying.
std::string generate_fixtures(const std::string& script, const std::string& subdir, int seed);

}  // namespace perceiver::parity
