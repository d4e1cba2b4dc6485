// The shared setup of RotaryEmbedding (rotary_setup.h).
#include "ops/transformer/rotary_setup.h"

#include <string>

#include "core/error.h"

namespace reforge::ops {

RotarySetup rotary_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& cos = ctx.input(1);
  const Tensor& sin = ctx.input(2);
  REFORGE_CHECK(x.rank() == 3 || x.rank() == 4, where, ": input must be 3D or 4D, got ", shape_str(x.shape()));
  REFORGE_CHECK(cos.dtype() == x.dtype() && sin.dtype() == x.dtype(), where,
                ": cos_cache and sin_cache must have the input's type ", dtype_name(x.dtype()));
  RotarySetup s;
  s.is_3d = x.rank() == 3;
  s.batch = x.dim(0);
  if (s.is_3d) {
    s.heads = ctx.attr_int("num_heads", 0);
    REFORGE_CHECK(s.heads > 0, where, ": 3D input needs a positive num_heads attribute, got ", s.heads);
    REFORGE_CHECK(x.dim(2) % s.heads == 0, where, ": hidden size ", x.dim(2), " is not divisible by num_heads ",
                  s.heads);
    s.seq = x.dim(1);
    s.head_size = x.dim(2) / s.heads;
  } else {
    s.heads = x.dim(1);
    s.seq = x.dim(2);
    s.head_size = x.dim(3);
  }
  s.rot = ctx.attr_int("rotary_embedding_dim", 0);
  if (s.rot == 0) s.rot = s.head_size;
  REFORGE_CHECK(s.rot > 0 && s.rot <= s.head_size && s.rot % 2 == 0, where, ": rotary_embedding_dim ", s.rot,
                " must be even and within the head size ", s.head_size);
  s.half = s.rot / 2;
  s.interleaved = ctx.attr_int("interleaved", 0) != 0;
  s.has_positions = ctx.has_input(3);
  if (s.has_positions) {
    const Tensor& pos = ctx.input(3);
    REFORGE_CHECK(is_integer(pos.dtype()) && pos.shape() == Shape({s.batch, s.seq}), where,
                  ": position_ids must be an integer tensor of shape [", s.batch, ",", s.seq, "], got ",
                  pos.describe());
    REFORGE_CHECK(cos.rank() == 2 && sin.shape() == cos.shape() && cos.dim(1) == s.half, where,
                  ": with position_ids, cos_cache and sin_cache must be [max_position, ", s.half, "], got ",
                  shape_str(cos.shape()), " and ", shape_str(sin.shape()));
  } else {
    REFORGE_CHECK(cos.shape() == Shape({s.batch, s.seq, s.half}) && sin.shape() == cos.shape(), where,
                  ": without position_ids, cos_cache and sin_cache must be [", s.batch, ",", s.seq, ",", s.half,
                  "], got ", shape_str(cos.shape()), " and ", shape_str(sin.shape()));
  }
  return s;
}

std::vector<int64_t> rotary_position_rows(const KernelContext& ctx, const RotarySetup& s,
                                          const std::vector<int64_t>& positions) {
  const int64_t max_position = ctx.input(1).dim(0);
  std::vector<int64_t> rows(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    REFORGE_CHECK(positions[i] >= 0 && positions[i] < max_position, ctx.node().label(), ": position id ", positions[i],
                  " is outside the cache [0, ", max_position, ")");
    rows[i] = positions[i] * s.half;
  }
  return rows;
}

}  // namespace reforge::ops
