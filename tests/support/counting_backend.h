// "counting": a test-only backend. For a handful of ops (Add, Mul, MatMul, Relu, Softmax,
// Transpose, Reshape, Gemm) it registers kernels that run the op's reference kernel (ops/) and
// count their calls per op type; it does not run the reference kernels of other ops, so a node of
// any other op cannot be placed on it. Its MatMul has a prepare step that stands for a device
// backend's weight upload: it copies a constant B input into the backend's weight memory (a host
// stand-in of a device's: one block per weight version, counted), which the kernel then reads
// instead of the input (so a run shows which prepared copy it used), and it can be told to fail
// (fail_counting_prepares_after), as an upload that runs out of device memory. It lives entirely here:
// registering it needs no change in src/ops or src/runtime, which is what it exists to show (tests/placement_test.cc).
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

// MatMul prepare steps run (successful or not) since the last reset_counting_calls().
int64_t counting_prepares();
// The next `successes` prepare steps succeed and the one after throws an Error (then they succeed
// again); a negative value: none fails (the default).
void fail_counting_prepares_after(int successes);
// Weight memory blocks alive now, and made since the process began.
int64_t counting_weight_blocks();
int64_t counting_weight_blocks_made();

}  // namespace reforge::test_support
