// RotaryEmbedding (opset 23): rotates pairs of features of each head by position-dependent angles
// given as cos/sin caches.
//
// Input is [batch, heads, seq, head_size] or [batch, seq, heads * head_size] (num_heads required).
// Only the first rotary_embedding_dim features (default: all) rotate; they pair up either as
// (x[k], x[k + dim/2]) (default) or as (x[2k], x[2k + 1]) (interleaved). The caches are indexed by
// position_ids[b, s] when given ([max_position, dim/2]) and are per-token ([batch, seq, dim/2])
// otherwise. Each product and sum rounds to the input type, as the ONNX reference does.
#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/registry.h"
#include "ops/transformer/rotary_setup.h"

namespace reforge::ops {
namespace {

template <typename T>
inline compute_t<T> rnd(compute_t<T> x) {
  return to_compute<T>(from_compute<T>(x));
}

void rotary_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cos = ctx.input(1);
  const Tensor& sin = ctx.input(2);
  const RotarySetup rs = rotary_setup(ctx);
  const bool is_3d = rs.is_3d, interleaved = rs.interleaved;
  const int64_t batch = rs.batch, heads = rs.heads, seq = rs.seq, head_size = rs.head_size;
  const int64_t rot = rs.rot, half = rs.half;

  // Cache row (in elements) for each (b, s).
  std::vector<int64_t> row(static_cast<size_t>(batch * seq));
  if (rs.has_positions) {
    row = rotary_position_rows(ctx, rs, ctx.input(3).to_int64_vector());
  } else {
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
        const int threads = batch * seq * heads * head_size > (1 << 16) ? omp_get_max_threads() : 1;
        parallel_for(batch * seq, threads, 1, [&](int64_t bs0, int64_t bs1) {
          for (int64_t bs = bs0; bs < bs1; ++bs) {
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
        });
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
