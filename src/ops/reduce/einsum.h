// Einsum equations, parsed once for the kernel (reduce/einsum.cc) and the shape inference
// (reduce/infer.cc).
#pragma once

#include <string>
#include <vector>

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

}  // namespace reforge::ops::einsum
