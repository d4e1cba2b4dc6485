// The CPU's reforge::MaxPool: MaxPool with layout = "NCHWc" or "NHWC".
#include <omp.h>

#include <cstring>

#include "backends/cpu/conv_layout.h"
#include "backends/cpu/cpu_backend.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {

namespace {

// reforge::MaxPool with layout = "NCHWc" or "NHWC": MaxPool over an activation stored
// channel-blocked ([N, C/b, H, W, b], see cpu::ActLayout) or channels-last ([N, H, W, C]), which
// the conv-channels-last pass puts between convolutions that keep their activations so. Both
// are stacks of images [H, W, c] (N * C/b of them with c = b, or N with c = C): each output
// position is a running max over whole channel rows, first tap first, `v > m ? v : m`, so values
// (NaN included) equal the NCHW kernel's. Other element types, or Indices, go through the NCHW
// kernel on converted copies.
struct PoolRows {
  const TapRange* rh;
  const TapRange* rw;
  const Geo3* g;
  int64_t H, W, OW, c;
};
// One output row (all OW positions, c channels each) of one image; kC = c when known at compile
// time (the channel blocks: one or two vector registers per tap), 0 for any c. Always inlined,
// so it is compiled for the ISA of the variant that calls it.
template <int64_t kC>
[[gnu::always_inline]] inline void max_pool_row(const PoolRows& p, const float* x, float* out, int64_t oh) {
  const Geo3& g = *p.g;
  const int64_t c = kC ? kC : p.c;
  const int64_t kh_first = p.rh->first[oh], kh_last = p.rh->last[oh];
  const int64_t row0 = (oh * g.s[1] - g.pb[1]) * p.W * c;  // offsets (may start before x: only taps inside are read)
  const int64_t kh_step = g.d[1] * p.W * c, kw_step = g.d[2] * c;
  for (int64_t ow = 0; ow < p.OW; ++ow, out += c) {
    const int64_t kw_first = p.rw->first[ow], kw_last = p.rw->last[ow];
    if (kh_first >= kh_last || kw_first >= kw_last) {
      for (int64_t i = 0; i < c; ++i) out[i] = 0.0f;
      continue;
    }
    const int64_t col = row0 + (ow * g.s[2] - g.pb[2]) * c;  // tap (kh, kw) at x[col + kh * kh_step + kw * kw_step]
    const float* v0 = x + col + kh_first * kh_step + kw_first * kw_step;
    // The running max starts at the first tap and then takes every tap, the first again
    // (`max(v, v) = v`, and a NaN first tap stays), so the loops need no special case.
    if constexpr (kC > 0) {
      // c fixed (a channel block): the running max in kC / 8 vector registers; `v > m ? v : m`
      // is one maxps and keeps the NCHW kernel's NaN behaviour.
      using V8 = float __attribute__((vector_size(32)));
      constexpr int kV = static_cast<int>(kC / 8);
      V8 m[kV];
      for (int j = 0; j < kV; ++j) std::memcpy(&m[j], v0 + 8 * j, sizeof(V8));
      for (int64_t kh = kh_first; kh < kh_last; ++kh)
        for (int64_t kw = kw_first; kw < kw_last; ++kw) {
          const float* v = x + col + kh * kh_step + kw * kw_step;
          for (int j = 0; j < kV; ++j) {
            V8 t;
            std::memcpy(&t, v + 8 * j, sizeof(V8));
            m[j] = t > m[j] ? t : m[j];
          }
        }
      for (int j = 0; j < kV; ++j) std::memcpy(out + 8 * j, &m[j], sizeof(V8));
    } else {
      for (int64_t i = 0; i < c; ++i) out[i] = v0[i];
      for (int64_t kh = kh_first; kh < kh_last; ++kh)
        for (int64_t kw = kw_first; kw < kw_last; ++kw) {
          const float* v = x + col + kh * kh_step + kw * kw_step;
          for (int64_t i = 0; i < c; ++i) out[i] = v[i] > out[i] ? v[i] : out[i];
        }
    }
  }
}
REFORGE_SIMD_VARIANTS(, void, max_pool_row_f32, (const PoolRows& p, const float* x, float* out, int64_t oh),
                      (p, x, out, oh), {
                        if (p.c == 8)
                          max_pool_row<8>(p, x, out, oh);
                        else if (p.c == 16)
                          max_pool_row<16>(p, x, out, oh);
                        else
                          max_pool_row<0>(p, x, out, oh);
                      })

void max_pool_layout_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const ir::Node& node = ctx.node();  // its label only when a check fails
  const std::string layout = ctx.attr_string("layout", "NHWC");
  REFORGE_CHECK(layout == "NHWC" || layout == "NCHWc", node.label(), ": layout must be 'NHWC' or 'NCHWc', got '",
                layout, "'");
  const cpu::ActLayout l = parse_layout(layout);
  const Shape xs = logical_shape(X, l, node);
  const int64_t N = xs[0], C = xs[1], H = xs[2], Wd = xs[3];
  std::vector<int64_t> kernel = kernel_shape_attr(ctx, 2);
  REFORGE_CHECK(kernel.size() == 2, node.label(), ": the kernel_shape attribute must have 2 values");
  const Window win = resolve_window(ctx, {H, Wd}, kernel, ctx.attr_int("ceil_mode", 0) != 0);
  const Geo3 g = to_geo3(win);
  const bool indices = ctx.num_outputs() > 1 && ctx.output_wanted(1);
  // "NCHWc" is plain NCHW on CPUs whose convolutions take no blocked layout.
  if (X.dtype() != DType::Float32 || indices || l == cpu::ActLayout::Nchw) {
    // To NCHW, the ONNX kernel, and back.
    static const OpDef* onnx_max_pool = OpRegistry::global().find("", "MaxPool", 12);
    REFORGE_ASSERT(onnx_max_pool != nullptr && onnx_max_pool->kernel);
    Tensor xc = to_nchw(X, l, node);
    ir::Node plain = ctx.node();
    plain.attrs.erase("layout");
    KernelContext inner(plain, {&xc}, ctx.threads());
    onnx_max_pool->kernel(inner);
    for (size_t o = 0; o < ctx.num_outputs() && o < 2; ++o) {
      if (!ctx.output_wanted(o)) continue;
      // Indices stay flat NCHW positions, as ONNX defines them, stored in the same layout.
      ctx.set_output(o, from_nchw(inner.outputs()[o], l));
    }
    return;
  }
  const int64_t OH = win.out[0], OW = win.out[1];
  Tensor& Y = ctx.allocate_output_uninit(0, DType::Float32, physical_shape({N, C, OH, OW}, l));
  if (Y.numel() == 0) return;
  const int64_t c = l == cpu::ActLayout::Nhwc ? C : X.dim(4);
  const int64_t images = l == cpu::ActLayout::Nhwc ? N : N * X.dim(1);
  TapRange rh = tap_range(OH, g.k[1], g.s[1], g.d[1], g.pb[1], 0, H);
  TapRange rw = tap_range(OW, g.k[2], g.s[2], g.d[2], g.pb[2], 0, Wd);
  const PoolRows rows{&rh, &rw, &g, H, Wd, OW, c};
  const float* x = X.data<float>();
  float* y = Y.mutable_data<float>();
  parallel_tasks(images * OH, Y.numel() > (1 << 15) ? omp_get_max_threads() : 1, [&](int64_t ioh) {
    const int64_t i = ioh / OH, oh = ioh % OH;
    max_pool_row_f32(rows, x + i * H * Wd * c, y + ioh * OW * c, oh);
  });
}

}  // namespace

}  // namespace reforge::ops::nn

namespace reforge::cpu {

void register_max_pool_kernels(KernelRegistry& r) {
  r.add({"cpu", "reforge", "MaxPool", 1, INT_MAX, ops::nn::max_pool_layout_kernel});
}

}  // namespace reforge::cpu
