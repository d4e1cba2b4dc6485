// ConvTranspose (1-D/2-D/3-D, groups, strides, dilations, pads/auto_pad, output_padding,
// output_shape, bias).
//
// Computed the way the ONNX reference does, but with a fast product: per image and group,
// columns = W_g^T x X_g (a [M/g * kernel, pixels] matrix, through the product the caller
// plugs in: the reference loops here, oneDNN on the CPU backend), then col2im scatters every column entry to its output
// position. Pad and output-size rules follow the reference implementation: with explicit (or default zero) pads,
// output_shape only sets the output size; with auto_pad SAME_*, pads are derived from the
// output size, the odd unit going to the end for SAME_UPPER and the beginning for SAME_LOWER.
#include <omp.h>

#include <type_traits>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/nn/conv.h"
#include "ops/nn/matmul.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {

namespace {

int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

// C is float or double: the compute type.
template <typename C>
void conv_transpose_compute(MatmulProduct product, DType mm_dtype, const C* x, const C* w, const C* bias, C* y,
                            int64_t N, int64_t Cin, int64_t M, int64_t group, const Geo3& g) {
  const int64_t Cg = Cin / group, Mg = M / group;
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  const int64_t kp = g.k[0] * g.k[1] * g.k[2];
  std::vector<C> col(static_cast<size_t>(Mg * kp * in_plane));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t grp = 0; grp < group; ++grp) {
      const C* xg = x + (n * Cin + grp * Cg) * in_plane;
      const C* wg = w + grp * Cg * Mg * kp;
      C* yg = y + (n * M + grp * Mg) * out_plane;
      if (Cg > 0) {
        MatmulDims d;
        d.M = Mg * kp, d.K = Cg, d.N = in_plane;
        d.trans_a = true;  // W_g is stored [Cg, Mg*kp]
        product(mm_dtype, d, wg, xg, col.data());
      }
      parallel_for(Mg, Mg * kp * in_plane > (1 << 15) ? omp_get_max_threads() : 1, 1, [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) {
          C* yp = yg + m * out_plane;
          const C b = bias ? bias[grp * Mg + m] : C(0);
          for (int64_t i = 0; i < out_plane; ++i) yp[i] = b;
          if (Cg == 0) continue;
          for (int64_t kd = 0; kd < g.k[0]; ++kd)
            for (int64_t kh = 0; kh < g.k[1]; ++kh)
              for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                const C* cp = col.data() + (m * kp + (kd * g.k[1] + kh) * g.k[2] + kw) * in_plane;
                for (int64_t id = 0; id < g.in[0]; ++id) {
                  const int64_t od = id * g.s[0] - g.pb[0] + kd * g.d[0];
                  if (od < 0 || od >= g.out[0]) continue;
                  for (int64_t ih = 0; ih < g.in[1]; ++ih) {
                    const int64_t oh = ih * g.s[1] - g.pb[1] + kh * g.d[1];
                    if (oh < 0 || oh >= g.out[1]) continue;
                    const C* crow = cp + (id * g.in[1] + ih) * g.in[2];
                    C* yrow = yp + (od * g.out[1] + oh) * g.out[2];
                    for (int64_t iw = 0; iw < g.in[2]; ++iw) {
                      const int64_t ow = iw * g.s[2] - g.pb[2] + kw * g.d[2];
                      if (ow >= 0 && ow < g.out[2]) yrow[ow] += crow[iw];
                    }
                  }
                }
              }
        }
      });
    }
  }
}

std::vector<int64_t> ints_or(const KernelContext& ctx, const char* name, size_t len, int64_t def) {
  std::vector<int64_t> v = ctx.attr_ints(name, {});
  if (v.empty()) return std::vector<int64_t>(len, def);
  REFORGE_CHECK(v.size() == len, ctx.node().label(), ": attribute '", name, "' has ", v.size(), " values, expected ",
                len);
  return v;
}

}  // namespace

ConvTransposeSetup conv_transpose_setup(const KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(X.rank() >= 3 && X.rank() <= 5, label, ": X must be [N, C, spatial...] with 1 to 3 spatial dims, got ",
                X.describe());
  REFORGE_CHECK(W.rank() == X.rank(), label, ": W ", W.describe(), " must have the rank of X ", X.describe());
  REFORGE_CHECK(W.dtype() == X.dtype(), label, ": W has element type ", dtype_name(W.dtype()), ", X has ",
                dtype_name(X.dtype()));
  ConvTransposeSetup cs;
  const int64_t N = cs.N = X.dim(0), Cin = cs.Cin = X.dim(1);
  const int64_t group = cs.group = ctx.attr_int("group", 1);
  REFORGE_CHECK(group >= 1, label, ": group must be positive, got ", group);
  REFORGE_CHECK(W.dim(0) == Cin, label, ": W ", W.describe(), " must have ", Cin, " input channels (X is ",
                X.describe(), ")");
  REFORGE_CHECK(Cin % group == 0, label, ": ", Cin, " input channels are not divisible by group ", group);
  const int64_t M = cs.M = W.dim(1) * group;
  if (B) {
    REFORGE_CHECK(B->rank() == 1 && B->numel() == M, label, ": bias ", B->describe(), " must be [", M, "]");
    REFORGE_CHECK(B->dtype() == X.dtype(), label, ": bias has element type ", dtype_name(B->dtype()));
  }
  const size_t nsp = cs.nsp = static_cast<size_t>(X.rank() - 2);
  const std::vector<int64_t> kernel(W.shape().begin() + 2, W.shape().end());
  std::vector<int64_t> k_attr = kernel_shape_attr(ctx, nsp);
  REFORGE_CHECK(k_attr.empty() || k_attr == kernel, label, ": kernel_shape ", shape_str(k_attr), " does not match W ",
                W.describe());
  const std::vector<int64_t> strides = ints_or(ctx, "strides", nsp, 1);
  const std::vector<int64_t> dilations = ints_or(ctx, "dilations", nsp, 1);
  const std::vector<int64_t> out_pad = ints_or(ctx, "output_padding", nsp, 0);
  std::vector<int64_t> out_shape_attr = ctx.attr_ints("output_shape", {});
  if (out_shape_attr.size() == nsp + 2) out_shape_attr.erase(out_shape_attr.begin(), out_shape_attr.begin() + 2);
  REFORGE_CHECK(out_shape_attr.empty() || out_shape_attr.size() == nsp, label, ": output_shape has ",
                out_shape_attr.size(), " values for ", nsp, " spatial dims");
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  REFORGE_CHECK(auto_pad == "NOTSET" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || auto_pad == "VALID" ||
                    auto_pad.empty(),
                label, ": auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  const bool has_pads = ctx.node().has_attr("pads");
  std::vector<int64_t> pads = ints_or(ctx, "pads", 2 * nsp, 0);
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);

  std::vector<int64_t> out(nsp), pad_begin(nsp);
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t in = X.dim(static_cast<int64_t>(i) + 2);
    REFORGE_CHECK(strides[i] >= 1 && dilations[i] >= 1, label, ": strides and dilations must be positive");
    REFORGE_CHECK(out_pad[i] >= 0, label, ": output_padding must be non-negative, got ", out_pad[i]);
    REFORGE_CHECK(kernel[i] >= 1, label, ": W has an empty kernel dimension: ", W.describe());
    const int64_t span = (kernel[i] - 1) * dilations[i] + 1;
    const int64_t natural = strides[i] * (in - 1) + out_pad[i] + span;
    if (same && !has_pads) {
      out[i] = out_shape_attr.empty() ? in * strides[i] : out_shape_attr[i];
      const int64_t total = natural - out[i];
      pad_begin[i] = auto_pad == "SAME_UPPER" ? floor_div2(total) : total - floor_div2(total);
    } else {
      REFORGE_CHECK(pads[i] >= 0 && pads[i + nsp] >= 0, label, ": pads must be non-negative");
      pad_begin[i] = pads[i];
      out[i] = out_shape_attr.empty() ? natural - pads[i] - pads[i + nsp] : out_shape_attr[i];
    }
    REFORGE_CHECK(out[i] >= 0, label, ": output spatial dimension ", i, " would be ", out[i]);
  }
  cs.y_shape = {N, M};
  cs.y_shape.insert(cs.y_shape.end(), out.begin(), out.end());
  cs.win.in.assign(X.shape().begin() + 2, X.shape().end());
  cs.win.kernel = kernel, cs.win.strides = strides, cs.win.dilations = dilations;
  cs.win.pad_begin = pad_begin, cs.win.pad_end = pad_begin, cs.win.out = out;
  return cs;
}

void conv_transpose_run(KernelContext& ctx, MatmulProduct product) {
  const ConvTransposeSetup cs = conv_transpose_setup(ctx);
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const int64_t N = cs.N, Cin = cs.Cin, M = cs.M, group = cs.group;
  Tensor& Y = ctx.allocate_output(0, X.dtype(), cs.y_shape);
  if (Y.numel() == 0) return;

  const Geo3 g = to_geo3(cs.win);

  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          conv_transpose_compute<T>(product, X.dtype(), X.data<T>(), W.data<T>(), B ? B->data<T>() : nullptr,
                                    Y.mutable_data<T>(), N, Cin, M, group, g);
        } else {
          std::vector<float> x = to_floats(X), w = to_floats(W), b = B ? to_floats(*B) : std::vector<float>();
          std::vector<float> y(static_cast<size_t>(Y.numel()));
          conv_transpose_compute<float>(product, DType::Float32, x.data(), w.data(), B ? b.data() : nullptr, y.data(),
                                        N, Cin, M, group, g);
          store_floats(y, Y);
        }
      },
      "ConvTranspose");
}

namespace {

void conv_transpose_kernel(KernelContext& ctx) { conv_transpose_run(ctx, matmul_reference_product); }

}  // namespace

void register_conv_transpose_ops(OpRegistry& r) {
  r.add({"",
         "ConvTranspose",
         1,
         INT_MAX,
         conv_transpose_kernel,
         check_conv_like,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight}});
}

}  // namespace reforge::ops::nn
