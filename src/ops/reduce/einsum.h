// Einsum equations, parsed once for the kernel (reduce/einsum.cc) and the shape inference
// (reduce/infer.cc), and a node's resolved labels and sizes (the CPU and CUDA kernels).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace reforge::ops::einsum {

inline constexpr int kEllipsis = -1;  // marker inside a parsed term

struct Equation {
  std::vector<std::vector<int>> inputs;  // letters as ASCII codes, kEllipsis for "..."
  bool explicit_output = false;
  std::vector<int> output;
};

// Parses an equation (spaces ignored); throws an Error starting with `label` that says what is
// wrong with it: a character that is not a letter, a malformed or repeated ellipsis, a malformed
// output, a label repeated in the output or absent from every input.
Equation parse_equation(const std::string& raw, const std::string& label);

inline constexpr int kEllipsisBase = 128;  // labels of broadcast dims: 128, 129, ... (letters keep ASCII codes)
inline constexpr int kMaxLabels = 256;
using Sizes = std::array<int64_t, kMaxLabels>;

// An Einsum node resolved against its inputs: each input's labels per dimension (ellipses
// expanded into right-aligned broadcast labels), the output's labels, and every label's size
// (an input dimension of 1 against a larger size broadcasts). Throws an Error naming the node
// for a bad equation, an operand count or element type mismatch, or inconsistent sizes.
struct Plan {
  std::string equation;
  std::vector<std::vector<int>> terms;
  std::vector<int> out_labels;
  Sizes size;  // -1 for unused labels
};
Plan plan(const KernelContext& ctx);

}  // namespace reforge::ops::einsum
