// "counting": a test-only backend. For a handful of ops (Add, Mul, MatMul, Relu, Softmax,
// Transpose, Reshape, Gemm) it registers kernels that run the op's reference kernel (ops/) and
// count their calls per op type; it does not run the reference kernels of other ops, so a node of
// any other op cannot be placed on it. It lives entirely here: registering it needs no change in
// src/ops or src/runtime, which is what it exists to show (tests/placement_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace reforge::test_support {

inline constexpr const char* kCountingBackend = "counting";

// Registers the backend (once per process; later calls do nothing). counting_backend.cc also
// calls it from a static initializer.
void register_counting_backend();

// The op types the backend has kernels for.
const std::set<std::string>& counting_ops();

// Kernel calls per op type since the last reset.
std::map<std::string, int64_t> counting_calls();
void reset_counting_calls();

}  // namespace reforge::test_support
