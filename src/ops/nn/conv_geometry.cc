// Spatial geometry of Conv, ConvTranspose's input side and the pools: see nn_common.h.
#include <algorithm>

#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {

namespace {

std::vector<int64_t> ints_attr(const KernelContext& ctx, const char* name, size_t len, int64_t def) {
  std::vector<int64_t> v = ctx.attr_ints(name, {});
  if (v.empty()) return std::vector<int64_t>(len, def);
  REFORGE_CHECK(v.size() == len, ctx.node().label(), ": attribute '", name, "' has ", v.size(), " values, expected ",
                len);
  return v;
}

}  // namespace

std::vector<int64_t> kernel_shape_attr(const KernelContext& ctx, size_t nsp) {
  std::vector<int64_t> k = ctx.attr_ints("kernel_shape", {});
  if (k.empty()) return k;
  REFORGE_CHECK(k.size() == nsp, ctx.node().label(), ": kernel_shape has ", k.size(), " values but the input has ", nsp,
                " spatial dimensions");
  for (int64_t v : k) REFORGE_CHECK(v >= 1, ctx.node().label(), ": kernel_shape values must be positive, got ", v);
  return k;
}

Window resolve_window(const KernelContext& ctx, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                      bool ceil_mode) {
  const std::string& label = ctx.node().label();
  const size_t n = in.size();
  REFORGE_CHECK(n >= 1, label, ": input needs at least one spatial dimension (rank >= 3)");
  REFORGE_CHECK(kernel.size() == n, label, ": kernel has ", kernel.size(), " spatial dims, input has ", n);
  Window w;
  w.in = in;
  w.kernel = kernel;
  w.strides = ints_attr(ctx, "strides", n, 1);
  w.dilations = ints_attr(ctx, "dilations", n, 1);
  std::vector<int64_t> pads = ints_attr(ctx, "pads", 2 * n, 0);
  w.pad_begin.assign(pads.begin(), pads.begin() + n);
  w.pad_end.assign(pads.begin() + n, pads.end());
  w.out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    REFORGE_CHECK(kernel[i] >= 1, label, ": kernel dimension ", i, " is ", kernel[i], ", must be positive");
    REFORGE_CHECK(w.strides[i] >= 1, label, ": strides must be positive, got ", w.strides[i]);
    REFORGE_CHECK(w.dilations[i] >= 1, label, ": dilations must be positive, got ", w.dilations[i]);
    REFORGE_CHECK(w.pad_begin[i] >= 0 && w.pad_end[i] >= 0, label, ": pads must be non-negative, got ", w.pad_begin[i],
                  " and ", w.pad_end[i]);
  }
  std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      w.out[i] = (in[i] + w.strides[i] - 1) / w.strides[i];
      int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * w.strides[i] + w.span(i) - in[i]);
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[i] = total - w.pad_begin[i];
    }
  } else if (auto_pad == "VALID" || auto_pad == "NOTSET" || auto_pad.empty()) {
    if (auto_pad == "VALID") {
      std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
      std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
    }
    for (size_t i = 0; i < n; ++i) {
      int64_t room = in[i] + w.pad_begin[i] + w.pad_end[i] - w.span(i);
      REFORGE_CHECK(room >= 0, label, ": window of extent ", w.span(i), " (kernel ", kernel[i], ", dilation ",
                    w.dilations[i], ") does not fit spatial dimension ", i, " of size ", in[i], " with pads ",
                    w.pad_begin[i], "+", w.pad_end[i]);
      w.out[i] = room / w.strides[i] + 1;
      if (ceil_mode && auto_pad != "VALID") {
        if (room % w.strides[i] != 0) ++w.out[i];
        // A last window that would start inside the end padding is dropped (PyTorch's rule).
        if ((w.out[i] - 1) * w.strides[i] >= in[i] + w.pad_begin[i]) --w.out[i];
      }
    }
  } else {
    fail(label, ": auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  }
  return w;
}

Geo3 to_geo3(const Window& w) {
  REFORGE_ASSERT(w.rank() >= 1 && w.rank() <= 3);
  Geo3 g;
  const size_t lead = 3 - w.rank();
  for (size_t i = 0; i < 3; ++i) {
    if (i < lead) {
      g.in[i] = g.k[i] = g.s[i] = g.d[i] = g.out[i] = 1;
      g.pb[i] = 0;
    } else {
      const size_t j = i - lead;
      g.in[i] = w.in[j], g.k[i] = w.kernel[j], g.s[i] = w.strides[j], g.d[i] = w.dilations[j];
      g.pb[i] = w.pad_begin[j], g.out[i] = w.out[j];
    }
  }
  return g;
}

}  // namespace reforge::ops::nn
