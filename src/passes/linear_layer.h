// Linear layers as the weight-rewriting passes see them (linear-weights-precision,
// linear-weights-packing): the node forms that compute Y = X x W (+ b) with a constant float32
// matrix W, and the one node they are rewritten into.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "passes/build_state.h"

namespace reforge::passes {

// MatMul(X, W), reforge::MatMulAdd(X, W[, b]), or Gemm(X, W[, b]) with transA = 0, alpha = 1 and
// C absent (or beta = 0) or a constant float32 [N] vector with beta = 1; W a constant float32
// matrix ([K, N], or [N, K] for a Gemm with transB = 1).
struct LinearLayer {
  std::string x, w, bias;  // bias: empty when none
  bool trans_b = false;    // W is stored [N, K]
  int64_t K = 0, N = 0;
};

std::optional<LinearLayer> match_linear(const BuildState& s, const ir::Node& n);

// A new constant holding `op`(`input`) made by BuildState::fold (so it has provenance and a
// refit replays the step); returns its name, derived from `base`.
std::string fold_into(BuildState& s, const std::string& input, const std::string& base, const char* domain,
                      const char* op, int opset, std::map<std::string, ir::Attribute> attrs);

// The node that replaces `from` (keeping its name, first output and metadata): reforge-domain
// `op_type` on `inputs` with `attrs`.
ir::Node linear_node(const ir::Node& from, const char* op_type, std::vector<std::string> inputs,
                     std::map<std::string, ir::Attribute> attrs = {});

}  // namespace reforge::passes
