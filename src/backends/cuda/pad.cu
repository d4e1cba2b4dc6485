// Pad on the GPU (constant, reflect, edge, and wrap from opset 19; negative pads crop), with the
// CPU kernel's semantics (src/ops/tensor/pad_ops.cc): the host builds, per output dimension, the
// map from output coordinate to source coordinate (negative: the constant value), uploads the maps,
// and one kernel gathers every output element through them. pads and axes arrive on the host; the
// constant value is a data input (device memory), downloaded once and cast to the data type on the host.
#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "ops/tensor/tensor_common.h"

namespace reforge::cuda {

namespace {

unsigned grid_for(int64_t n) {
  const unsigned b = blocks_for(n);
  return b > 65535u * 4 ? 65535u * 4 : b;
}

template <typename F>
void by_size(DType t, const std::string& where, F&& f) {
  switch (dtype_size(t)) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    case 8:
      return f(TypeTag<uint64_t>{});
    default:
      fail(where, ": element type ", dtype_name(t), " is not supported on the CUDA backend");
  }
}

// Output dims, the input's strides, and where each dimension's map starts in the map buffer.
struct PadView {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t map_at[kMaxRank] = {};
};

template <typename U>
__global__ void pad_kernel_dev(U* dst, const U* src, U value, const int64_t* maps, PadView v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, off = 0;
    bool constant = false;
    for (int d = v.rank - 1; d >= 0; --d) {
      const int64_t q = rest / v.dims[d];
      const int64_t m = maps[v.map_at[d] + (rest - q * v.dims[d])];
      rest = q;
      if (m < 0) constant = true;
      off += m * v.stride[d];
    }
    dst[i] = constant ? value : src[off];
  }
}

enum class PadMode { Constant, Reflect, Edge, Wrap };

std::string check_pad(const ir::Node& node) {
  const std::string mode = node.attr_string("mode", "constant");
  if (mode == "constant" || mode == "reflect" || mode == "edge") return "";
  if (mode == "wrap" && node.opset >= 19) return "";
  return "mode '" + mode + "' is not supported";
}

std::vector<int64_t> index_map(int64_t in_dim, int64_t before, int64_t after, PadMode mode, int64_t axis,
                               const std::string& where) {
  const int64_t lo = std::max<int64_t>(0, -before);
  const int64_t n = in_dim - lo - std::max<int64_t>(0, -after);
  if (n < 0) fail(where, ": pads ", before, ",", after, " crop more than the size ", in_dim, " of axis ", axis);
  const int64_t pb = std::max<int64_t>(before, 0), pe = std::max<int64_t>(after, 0);
  if (n == 0 && (pb || pe) && mode != PadMode::Constant)
    fail(where, ": cannot pad an empty axis ", axis, " in a non-constant mode");
  std::vector<int64_t> m(static_cast<size_t>(n + pb + pe));
  for (int64_t o = 0; o < n + pb + pe; ++o) {
    int64_t j = o - pb;
    if (j < 0 || j >= n) {
      switch (mode) {
        case PadMode::Constant:
          j = -1 - lo;
          break;
        case PadMode::Edge:
          j = std::clamp<int64_t>(j, 0, n - 1);
          break;
        case PadMode::Wrap:
          j = ((j % n) + n) % n;
          break;
        case PadMode::Reflect:
          if (n == 1) {
            j = 0;
          } else {
            const int64_t p = 2 * (n - 1);
            j = ((j % p) + p) % p;
            if (j >= n) j = p - j;
          }
          break;
      }
    }
    m[static_cast<size_t>(o)] = j + lo;
  }
  return m;
}

void pad_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const std::string reason = check_pad(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const std::string mode_name = ctx.attr_string("mode", "constant");
  const PadMode mode = mode_name == "reflect" ? PadMode::Reflect
                       : mode_name == "edge"  ? PadMode::Edge
                       : mode_name == "wrap"  ? PadMode::Wrap
                                              : PadMode::Constant;
  std::vector<int64_t> pads;
  Tensor value = Tensor::scalar<float>(DType::Float32, 0.0f);
  if (ctx.opset() < 11) {
    const char* name = ctx.opset() < 2 ? "paddings" : "pads";
    if (!ctx.node().has_attr(name)) fail(where, ": required attribute '", name, "' is missing");
    pads = ctx.attr_ints(name);
    value = Tensor::scalar<float>(DType::Float32, ctx.attr_float("value", 0.0f));
  } else {
    pads = ops::read_int_tensor(ctx.input(1), where, "input 'pads'");
    if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
      const Tensor& cv = ctx.input(2);
      if (cv.numel() != 1) fail(where, ": constant_value must hold one value, got ", cv.describe());
      value = cv.on_host() ? cv : download(cv);
    }
  }
  std::vector<int64_t> axes;
  if (ctx.opset() >= 18 && ctx.has_input(3)) {
    axes = ops::normalize_axes(ops::read_int_tensor(ctx.input(3), where, "input 'axes'"), rank, where);
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  const size_t na = axes.size();
  if (pads.size() != 2 * na)
    fail(where, ": pads ", shape_str(pads), " must have ", 2 * na, " entries (begin and end for ", na, " axes)");
  std::vector<int64_t> before(static_cast<size_t>(rank), 0), after(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < na; ++i) {
    before[static_cast<size_t>(axes[i])] = pads[i];
    after[static_cast<size_t>(axes[i])] = pads[na + i];
  }
  std::vector<std::vector<int64_t>> maps;
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    const size_t k = static_cast<size_t>(d);
    if (before[k] > (int64_t{1} << 40) || after[k] > (int64_t{1} << 40) || before[k] < -(int64_t{1} << 40) ||
        after[k] < -(int64_t{1} << 40))
      fail(where, ": pads ", shape_str(pads), " are out of range");
    maps.push_back(index_map(x.dim(d), before[k], after[k], mode, d, where));
    out.push_back(static_cast<int64_t>(maps.back().size()));
  }
  shape_numel(out);
  const Tensor typed_value = cast_tensor(value.reshaped({}), x.dtype());
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  const int64_t n = y.numel();
  if (n == 0) return;
  REFORGE_CHECK(rank <= kMaxRank, where, ": rank ", rank, " exceeds the CUDA backend's ", kMaxRank);
  const std::vector<int64_t> xs = ops::contiguous_strides(x.shape());
  PadView v;
  v.rank = static_cast<int>(rank);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < rank; ++d) {
    v.dims[d] = out[static_cast<size_t>(d)];
    v.stride[d] = xs[static_cast<size_t>(d)];
    v.map_at[d] = static_cast<int64_t>(all.size());
    all.insert(all.end(), maps[static_cast<size_t>(d)].begin(), maps[static_cast<size_t>(d)].end());
  }
  if (all.empty()) all.push_back(0);  // rank 0: nothing to map
  const Tensor map_dev = to_device(Tensor::copy_of(DType::Int64, {static_cast<int64_t>(all.size())}, all.data()));
  by_size(x.dtype(), where, [&](auto tag) {
    using U = typename decltype(tag)::type;
    U value_bits;
    std::memcpy(&value_bits, typed_value.raw(), sizeof(U));
    pad_kernel_dev<U><<<grid_for(n), 256, 0, stream()>>>(
        static_cast<U*>(y.mutable_raw()), static_cast<const U*>(x.raw()), value_bits, map_dev.data<int64_t>(), v, n);
  });
  check_launch("pad");
}

}  // namespace

void register_pad_kernels(backends::KernelRegistry& r) { add_kernel(r, "", "Pad", pad_kernel, check_pad); }

}  // namespace reforge::cuda
