// RotaryEmbedding (opset 23): rotates pairs of features of each head by position-dependent angles
// given as cos/sin caches.
//
// Input is [batch, heads, seq, head_size] or [batch, seq, heads * head_size] (num_heads required).
// Only the first rotary_embedding_dim features (default: all) rotate; they pair up either as
// (x[k], x[k + dim/2]) (default) or as (x[2k], x[2k + 1]) (interleaved). The caches are indexed by
// position_ids[b, s] when given ([max_position, dim/2]) and are per-token ([batch, seq, dim/2])
// otherwise. Each product and sum rounds to the input type, as the ONNX reference does.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

template <typename T>
inline compute_t<T> rnd(compute_t<T> x) {
  return to_compute<T>(from_compute<T>(x));
}

void rotary_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& cos = ctx.input(1);
  const Tensor& sin = ctx.input(2);
  REFORGE_CHECK(x.rank() == 3 || x.rank() == 4, where, ": input must be 3D or 4D, got ", shape_str(x.shape()));
  REFORGE_CHECK(cos.dtype() == x.dtype() && sin.dtype() == x.dtype(), where,
                ": cos_cache and sin_cache must have the input's type ", dtype_name(x.dtype()));
  const bool is_3d = x.rank() == 3;
  const int64_t batch = x.dim(0);
  int64_t heads, seq, head_size;
  if (is_3d) {
    heads = ctx.attr_int("num_heads", 0);
    REFORGE_CHECK(heads > 0, where, ": 3D input needs a positive num_heads attribute, got ", heads);
    REFORGE_CHECK(x.dim(2) % heads == 0, where, ": hidden size ", x.dim(2), " is not divisible by num_heads ", heads);
    seq = x.dim(1);
    head_size = x.dim(2) / heads;
  } else {
    heads = x.dim(1);
    seq = x.dim(2);
    head_size = x.dim(3);
  }
  int64_t rot = ctx.attr_int("rotary_embedding_dim", 0);
  if (rot == 0) rot = head_size;
  REFORGE_CHECK(rot > 0 && rot <= head_size && rot % 2 == 0, where, ": rotary_embedding_dim ", rot,
                " must be even and within the head size ", head_size);
  const int64_t half = rot / 2;
  const bool interleaved = ctx.attr_int("interleaved", 0) != 0;

  // Cache row (in elements) for each (b, s).
  std::vector<int64_t> row(static_cast<size_t>(batch * seq));
  if (ctx.has_input(3)) {
    const Tensor& pos = ctx.input(3);
    REFORGE_CHECK(is_integer(pos.dtype()) && pos.shape() == Shape({batch, seq}), where,
                  ": position_ids must be an integer tensor of shape [", batch, ",", seq, "], got ", pos.describe());
    REFORGE_CHECK(cos.rank() == 2 && sin.shape() == cos.shape() && cos.dim(1) == half, where,
                  ": with position_ids, cos_cache and sin_cache must be [max_position, ", half, "], got ",
                  shape_str(cos.shape()), " and ", shape_str(sin.shape()));
    std::vector<int64_t> p = pos.to_int64_vector();
    for (size_t i = 0; i < p.size(); ++i) {
      REFORGE_CHECK(p[i] >= 0 && p[i] < cos.dim(0), where, ": position id ", p[i], " is outside the cache [0, ",
                    cos.dim(0), ")");
      row[i] = p[i] * half;
    }
  } else {
    REFORGE_CHECK(cos.shape() == Shape({batch, seq, half}) && sin.shape() == cos.shape(), where,
                  ": without position_ids, cos_cache and sin_cache must be [", batch, ",", seq, ",", half, "], got ",
                  shape_str(cos.shape()), " and ", shape_str(sin.shape()));
    for (int64_t i = 0; i < batch * seq; ++i) row[i] = i * half;
  }

  Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
  // Strides of (b, s, h) in the input/output layout; the feature axis is contiguous.
  const int64_t sb = heads * seq * head_size;
  const int64_t ss = is_3d ? heads * head_size : head_size;
  const int64_t sh = is_3d ? head_size : seq * head_size;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = compute_t<T>;
        const T* xd = x.data<T>();
        const T* cd = cos.data<T>();
        const T* sd = sin.data<T>();
        T* od = out.mutable_data<T>();
#pragma omp parallel for if (batch * seq * heads * head_size > (1 << 16))
        for (int64_t bs = 0; bs < batch * seq; ++bs) {
          const int64_t b = bs / seq, s = bs % seq;
          const T* c = cd + row[bs];
          const T* sn = sd + row[bs];
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t base = b * sb + s * ss + h * sh;
            const T* in = xd + base;
            T* o = od + base;
            for (int64_t k = 0; k < half; ++k) {
              const int64_t i1 = interleaved ? 2 * k : k;
              const int64_t i2 = interleaved ? 2 * k + 1 : k + half;
              const C x1 = to_compute(in[i1]), x2 = to_compute(in[i2]);
              const C ck = to_compute(c[k]), sk = to_compute(sn[k]);
              o[i1] = from_compute<T>(rnd<T>(ck * x1) - rnd<T>(sk * x2));
              o[i2] = from_compute<T>(rnd<T>(sk * x1) + rnd<T>(ck * x2));
            }
            for (int64_t e = rot; e < head_size; ++e) o[e] = in[e];
          }
        }
      },
      "RotaryEmbedding");
}

}  // namespace

void register_rotary_embedding(OpRegistry& r) {
  r.add({"",
         "RotaryEmbedding",
         23,
         INT_MAX,
         rotary_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kData, InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
