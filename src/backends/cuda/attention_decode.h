// Attention of one query row per head (a decoding step) for reforge::Attention of 16-bit inputs
// with precision 'float32': the fused kernel's semantics (attention.cu) on a kernel shaped for
// that form. A block serves one key-value head and every query head that reads it (grouped-query
// attention) over a split of the keys: its threads load the split's keys and values once with
// 16-byte loads, each thread scores one key against all the group's query heads, the group's
// running max and sum are kept per head (online softmax in float32), and the block leaves its
// unnormalized sums, max and exponential sum per head; the block that finishes a head group last
// joins the splits in split order (the result does not depend on which block ran when) and writes
// the output rows. Scores, mask and scale as the fused kernel: the QK product in float32, the
// scale multiplied (divided for 'div'), the additive mask added (read in its own type, bfloat16,
// float16 or float32) or the boolean mask's fill; a row whose scores are all -inf is NaN (zeros
// under softmax_nan 'zero').
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace reforge::cuda {

// One decoding attention: pointers to device memory, strides in elements. Q [B, Hq, D] rows,
// K and V [B, Hkv, L, D] through strides (features contiguous), Y [B, Hq, D] rows.
struct DecodeAttention {
  DType dtype = DType::BFloat16;  // of Q, K, V and Y: bfloat16 or float16
  const void* q = nullptr;
  int64_t q_sb = 0, q_sh = 0;
  const void* k = nullptr;
  int64_t k_sb = 0, k_sh = 0, k_ss = 0;
  const void* v = nullptr;
  int64_t v_sb = 0, v_sh = 0, v_ss = 0;
  void* y = nullptr;
  int64_t y_sb = 0, y_sh = 0;
  int64_t B = 0, Hq = 0, L = 0, D = 0;
  int64_t group = 1;  // query heads per key-value head: q head h reads kv head h / group
  // 0 none, 1 multiply the scores by the scalar, 2 divide them by it, 3 'mul_qk': Q multiplied by
  // the scalar and K by k_scale before their product (PyTorch's scaled_dot_product_attention
  // decomposition), in float32
  int scale_op = 0;
  const void* scale_p = nullptr;
  int scale_type = 0;  // device_scalar.cuh's ScalarType
  const void* k_scale_p = nullptr;
  int k_scale_type = 0;
  // Additive mask, indexed b * m_sb + h * m_sh + j * m_sk for key j (null: none).
  const void* mask = nullptr;
  DType mask_dtype = DType::Float32;
  // Boolean mask: the score becomes the fill where mask == fill_when (null: none).
  const bool* mask_b = nullptr;
  bool fill_when = true;
  const void* fill_p = nullptr;
  int fill_type = 0;
  int64_t m_sb = 0, m_sh = 0, m_sk = 0;
  bool nan_rows_zero = false;
  // Keys a block takes (a split of the keys); 0: the launch's choice (every multiprocessor two
  // blocks, at least 32 keys each). The result is the same to rounding either way.
  int64_t split_keys = 0;
};

// Whether decode_attention takes `a`: 16-bit Q/K/V, head size a multiple of 8 up to 128, at most
// 8 query heads per key-value head, features contiguous and 16-byte aligned rows of K and V, an
// additive mask of the inputs' type or float32.
bool decode_attention_fits(const DecodeAttention& a);

// Launches the kernel above on the calling thread's stream (decode_attention_fits(a) holds).
void decode_attention(const DecodeAttention& a);

}  // namespace reforge::cuda
