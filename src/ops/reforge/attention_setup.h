// What the CPU's and the CUDA kernel of reforge::Attention (backends/cpu/attention.cc,
// backends/cuda/attention.cu) share: the attribute checker, the layouts, and the proof that the
// grouped-query shape inputs repeat every K/V head. Header-only: the CUDA compiler includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "ir/graph.h"

namespace reforge::ops {

// The checker of both kernels: layouts, scale_op, precision, mask_mode. precision 'rounded' (the
// default) rounds as the unfused ops do, in the inputs' type; 'float32' (fuse-attention's node of
// 16-bit inputs) computes scores, softmax and the weighted sum in float32 and rounds the output
// once (the CPU's kernel declines it: there 16-bit attention stays unfused).
inline std::string fused_attention_check(const ir::Node& n) {
  for (const char* a : {"q_layout", "v_layout", "out_layout", "k_layout"}) {
    std::string v = n.attr_string(a, "bhsd");
    if (v != "bhsd" && v != "bshd" && !(v == "bhds" && std::string(a) == "k_layout"))
      return std::string(a) + " '" + v + "' is not one of bhsd, bshd" + (std::string(a) == "k_layout" ? ", bhds" : "");
  }
  std::string s = n.attr_string("scale_op", "none");
  if (s != "none" && s != "mul" && s != "div" && s != "mul_qk")
    return "scale_op '" + s + "' is not one of none, mul, div, mul_qk";
  if (s == "mul_qk" && (n.inputs.size() < 11 || n.inputs[3].empty() || n.inputs[10].empty()))
    return "scale_op 'mul_qk' needs the scale (input 3) and the K scale (input 10)";
  std::string z = n.attr_string("softmax_nan", "keep");
  if (z != "keep" && z != "zero") return "softmax_nan '" + z + "' is not one of keep, zero";
  std::string pr = n.attr_string("precision", "rounded");
  if (pr != "rounded" && pr != "float32") return "precision '" + pr + "' is not one of rounded, float32";
  std::string m = n.attr_string("mask_mode", "none");
  if (m != "none" && m != "add" && m != "where_fill_true" && m != "where_fill_false")
    return "mask_mode '" + m + "' is not one of none, add, where_fill_true, where_fill_false";
  return "";
}

// q_layout, k_layout, v_layout, out_layout: [B,H,S,D], [B,S,H,D], or (K only) [B,H,D,S].
enum class AttnLayout { BHSD, BSHD, BHDS };

inline AttnLayout parse_attn_layout(const ir::Node& n, const char* attr, bool allow_bhds) {
  std::string v = n.attr_string(attr, "bhsd");
  if (v == "bhsd") return AttnLayout::BHSD;
  if (v == "bshd") return AttnLayout::BSHD;
  if (v == "bhds" && allow_bhds) return AttnLayout::BHDS;
  fail(n.label(), ": ", attr, " '", v, "' is not supported");
}

// Checks that Unsqueeze(2) -> Expand(expand) -> Reshape(reshape) of a [b, h, s, d] tensor is a
// repeat of every head `group` times, and returns group (0 when it is anything else).
inline int64_t repeat_group(int64_t b, int64_t h, int64_t s, int64_t d, const std::vector<int64_t>& es,
                            const std::vector<int64_t>& rs, bool allowzero) {
  const int64_t in[5] = {b, h, 1, s, d};
  if (es.size() > 5 || rs.size() != 4) return 0;
  int64_t e[5];
  for (int i = 0; i < 5; ++i) {
    int64_t t = i >= 5 - static_cast<int>(es.size()) ? es[i - (5 - es.size())] : 1;
    if (!(t == in[i] || t == 1 || in[i] == 1)) return 0;
    e[i] = in[i] == 1 ? t : in[i];
  }
  if (!(e[0] == in[0] && e[1] == in[1] && e[3] == in[3] && e[4] == in[4] && e[2] >= 1)) return 0;
  const int64_t want[4] = {e[0], e[1] * e[2], e[3], e[4]};
  int64_t known = 1, infer = -1;
  int64_t r[4];
  for (int i = 0; i < 4; ++i) {
    r[i] = rs[i] == 0 && !allowzero ? e[i] : rs[i];
    if (r[i] == -1)
      infer = i;
    else
      known *= r[i];
  }
  if (infer >= 0) r[infer] = known ? (e[0] * e[1] * e[2] * e[3] * e[4]) / known : 0;
  for (int i = 0; i < 4; ++i)
    if (r[i] != want[i]) return 0;
  return e[2];
}

}  // namespace reforge::ops
