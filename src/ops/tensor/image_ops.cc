// CenterCropPad, Col2Im and Upsample.
//
// CenterCropPad brings each listed axis (`axes`, default all) to the size given by its `shape`
// input: a larger input is cropped around its center (the crop starts at floor((in - out) / 2)),
// a smaller one is zero-padded around it (placed at floor((out - in) / 2)).
//
// Col2Im is the inverse of im2col: input [N, C * prod(block_shape), L] holds, for each of the L
// sliding-block positions over the padded image, the block's C * prod(block) values; the output
// [N, C, image_shape...] sums every block value into the image position it came from (positions in
// the padding are dropped). L must equal the number of block positions
// prod((image + pad_begin + pad_end - dilation * (block - 1) - 1) / stride + 1).
//
// Upsample (opsets 7 to 9; Resize replaces it) scales every axis by `scales` (an attribute at
// opset 7, an input from 9): output size floor(in * scale), output index o reading input
// coordinate o / scale; mode 'nearest' (default) takes floor of it, 'linear' interpolates
// between floor and the next index (clamped to the last) per axis.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

void center_crop_pad_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> sizes = read_int_tensor(ctx.input(1), label, "shape");
  const int64_t rank = x.rank();
  std::vector<int64_t> axes = ctx.attr_ints("axes");
  if (!ctx.node().has_attr("axes"))
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  axes = normalize_axes(axes, rank, label);
  REFORGE_CHECK(sizes.size() == axes.size(), label, ": shape has ", sizes.size(), " values for ", axes.size(), " axes");
  Shape out_shape = x.shape();
  std::vector<int64_t> in_start(static_cast<size_t>(rank), 0), out_start(static_cast<size_t>(rank), 0);
  Shape copy = x.shape();  // extent copied per axis
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    const int64_t in = x.dim(axes[i]), out = sizes[i];
    REFORGE_CHECK(out >= 0, label, ": shape value ", out, " for axis ", axes[i], " is negative");
    out_shape[a] = out;
    if (out < in) {
      in_start[a] = (in - out) / 2;
      copy[a] = out;
    } else {
      out_start[a] = (out - in) / 2;
      copy[a] = in;
    }
  }
  Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);  // zero: the padding
  if (shape_numel(copy) == 0) return;
  REFORGE_CHECK(dtype_size(x.dtype()) > 0, label, ": element type ", dtype_name(x.dtype()), " is not supported");
  const size_t elem = dtype_size(x.dtype());
  const std::vector<int64_t> xs = contiguous_strides(x.shape()), ys = contiguous_strides(out_shape);
  int64_t src_off = 0, dst_off = 0;
  for (int64_t d = 0; d < rank; ++d) {
    src_off += in_start[static_cast<size_t>(d)] * xs[static_cast<size_t>(d)];
    dst_off += out_start[static_cast<size_t>(d)] * ys[static_cast<size_t>(d)];
  }
  // Walk the copied box in C order, one innermost row at a time.
  const int64_t row = rank == 0 ? 1 : copy[static_cast<size_t>(rank - 1)];
  const int64_t rows = shape_numel(copy) / row;
  const auto* src = static_cast<const uint8_t*>(static_cast<const void*>(x.data<uint8_t>()));
  auto* dst = y.mutable_data<uint8_t>();
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(rank - 1, 0)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t so = src_off, d_o = dst_off;
    for (int64_t d = 0; d + 1 < rank; ++d) {
      so += idx[static_cast<size_t>(d)] * xs[static_cast<size_t>(d)];
      d_o += idx[static_cast<size_t>(d)] * ys[static_cast<size_t>(d)];
    }
    std::memcpy(dst + static_cast<size_t>(d_o) * elem, src + static_cast<size_t>(so) * elem,
                static_cast<size_t>(row) * elem);
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < copy[static_cast<size_t>(d)]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
}

void col2im_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> image = read_int_tensor(ctx.input(1), label, "image_shape");
  const std::vector<int64_t> block = read_int_tensor(ctx.input(2), label, "block_shape");
  const size_t nd = image.size();
  REFORGE_CHECK(nd >= 1 && block.size() == nd, label, ": image_shape (", nd, " values) and block_shape (", block.size(),
                " values) must have the same, non-zero length");
  REFORGE_CHECK(x.rank() == 3, label, ": input must be [N, C * prod(block_shape), L], got ", x.describe());
  const std::vector<int64_t> dil = ctx.attr_ints("dilations", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> strides = ctx.attr_ints("strides", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * nd, 0));
  REFORGE_CHECK(dil.size() == nd && strides.size() == nd && pads.size() == 2 * nd, label,
                ": dilations and strides need ", nd, " values and pads ", 2 * nd);
  int64_t block_size = 1, positions = 1;
  std::vector<int64_t> cols(nd);
  for (size_t i = 0; i < nd; ++i) {
    REFORGE_CHECK(image[i] >= 0 && block[i] >= 1 && dil[i] >= 1 && strides[i] >= 1 && pads[i] >= 0 && pads[i + nd] >= 0,
                  label, ": invalid geometry along spatial axis ", i);
    block_size *= block[i];
    cols[i] = (image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) / strides[i] + 1;
    REFORGE_CHECK(cols[i] >= 1, label, ": no block position fits along spatial axis ", i);
    positions *= cols[i];
  }
  const int64_t n = x.dim(0);
  REFORGE_CHECK(x.dim(1) % block_size == 0, label, ": input dimension 1 (", x.dim(1),
                ") is not a multiple of the block size ", block_size);
  REFORGE_CHECK(x.dim(2) == positions, label, ": input dimension 2 (", x.dim(2), ") must be the number of blocks, ",
                positions);
  const int64_t c = x.dim(1) / block_size;
  Shape out_shape{n, c};
  out_shape.insert(out_shape.end(), image.begin(), image.end());
  Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
  if (y.numel() == 0) return;
  const int64_t plane = shape_numel(Shape(image.begin(), image.end()));
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<compute_t<T>> acc(static_cast<size_t>(plane));
        std::vector<int64_t> koff(nd), cpos(nd);
        for (int64_t nc = 0; nc < n * c; ++nc) {
          std::fill(acc.begin(), acc.end(), compute_t<T>(0));
          for (int64_t k = 0; k < block_size; ++k) {
            for (int64_t i = static_cast<int64_t>(nd) - 1, r = k; i >= 0; --i) {
              koff[static_cast<size_t>(i)] = r % block[static_cast<size_t>(i)];
              r /= block[static_cast<size_t>(i)];
            }
            const T* col = xs + (nc * block_size + k) * positions;
            for (int64_t p = 0; p < positions; ++p) {
              for (int64_t i = static_cast<int64_t>(nd) - 1, r = p; i >= 0; --i) {
                cpos[static_cast<size_t>(i)] = r % cols[static_cast<size_t>(i)];
                r /= cols[static_cast<size_t>(i)];
              }
              int64_t flat = 0;
              bool inside = true;
              for (size_t i = 0; i < nd && inside; ++i) {
                const int64_t at = cpos[i] * strides[i] - pads[i] + koff[i] * dil[i];
                inside = at >= 0 && at < image[i];
                flat = flat * image[i] + at;
              }
              if (inside) acc[static_cast<size_t>(flat)] += to_compute(col[p]);
            }
          }
          T* yp = ys + nc * plane;
          for (int64_t i = 0; i < plane; ++i) yp[i] = from_compute<T>(acc[static_cast<size_t>(i)]);
        }
      },
      label.c_str());
}

std::string check_upsample(const ir::Node& node) {
  const std::string m = node.attr_string("mode", "nearest");
  if (m != "nearest" && m != "linear" && m != "bilinear") return "mode '" + m + "' is not supported";
  return "";
}

void upsample_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<double> scales;
  if (ctx.opset() >= 9) {
    const Tensor& s = ctx.input(1);
    REFORGE_CHECK(is_float(s.dtype()) && s.rank() == 1, label, ": scales must be a 1-D float tensor, got ",
                  s.describe());
    for (int64_t i = 0; i < s.numel(); ++i) scales.push_back(s.as_double(i));
  } else {
    for (float f : ctx.attr_floats("scales")) scales.push_back(f);
  }
  const int64_t rank = x.rank();
  REFORGE_CHECK(static_cast<int64_t>(scales.size()) == rank, label, ": scales has ", scales.size(),
                " values for an input of rank ", rank);
  const std::string why = check_upsample(ctx.node());
  REFORGE_CHECK(why.empty(), label, ": ", why);
  const bool linear = ctx.attr_string("mode", "nearest") != "nearest";
  Shape out_shape(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    REFORGE_CHECK(scales[static_cast<size_t>(d)] >= 1.0, label, ": scale ", scales[static_cast<size_t>(d)], " of axis ",
                  d, " is below 1");
    out_shape[static_cast<size_t>(d)] =
        static_cast<int64_t>(std::floor(static_cast<double>(x.dim(d)) * scales[static_cast<size_t>(d)]));
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out_shape);
  if (y.numel() == 0) return;
  const std::vector<int64_t> xs_strides = contiguous_strides(x.shape());
  dispatch_numeric(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<int64_t> idx(static_cast<size_t>(rank), 0), i0(static_cast<size_t>(rank)),
            i1(static_cast<size_t>(rank));
        std::vector<double> w(static_cast<size_t>(rank));
        for (int64_t flat = 0; flat < y.numel(); ++flat) {
          for (int64_t d = 0; d < rank; ++d) {
            const size_t a = static_cast<size_t>(d);
            const double src = static_cast<double>(idx[a]) / scales[a];
            const int64_t f = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), x.dim(d) - 1);
            i0[a] = f;
            i1[a] = std::min<int64_t>(f + 1, x.dim(d) - 1);
            w[a] = linear ? src - static_cast<double>(f) : 0.0;
          }
          double acc = 0.0;
          for (int64_t corner = 0; corner < (int64_t{1} << rank); ++corner) {
            double weight = 1.0;
            int64_t off = 0;
            for (int64_t d = 0; d < rank; ++d) {
              const size_t a = static_cast<size_t>(d);
              const bool hi = (corner >> d) & 1;
              weight *= hi ? w[a] : 1.0 - w[a];
              off += (hi ? i1[a] : i0[a]) * xs_strides[a];
            }
            if (weight != 0.0) acc += weight * static_cast<double>(to_compute(xs[off]));
          }
          ys[flat] = from_compute<T>(static_cast<compute_t<T>>(acc));
          for (int64_t d = rank - 1; d >= 0; --d) {
            if (++idx[static_cast<size_t>(d)] < out_shape[static_cast<size_t>(d)]) break;
            idx[static_cast<size_t>(d)] = 0;
          }
        }
      },
      label.c_str());
}

}  // namespace

void register_image_ops(OpRegistry& r) {
  r.add({"", "Upsample", 7, 9, upsample_kernel, check_upsample, nullptr, {InputRole::kData, InputRole::kShape}});
  r.add({"",
         "CenterCropPad",
         18,
         INT_MAX,
         center_crop_pad_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kShape}});
  r.add({"",
         "Col2Im",
         18,
         INT_MAX,
         col2im_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kShape, InputRole::kShape}});
}

}  // namespace reforge::ops
