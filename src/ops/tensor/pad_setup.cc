// The shared setup of Pad (pad_setup.h).
#include "ops/tensor/pad_setup.h"

#include <algorithm>

#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

enum class PadMode { Constant, Reflect, Edge, Wrap };

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

}  // namespace

std::string pad_check(const ir::Node& node) {
  const std::string mode = node.attr_string("mode", "constant");
  if (mode == "constant" || mode == "reflect" || mode == "edge") return "";
  if (mode == "wrap" && node.opset >= 19) return "";
  return "mode '" + mode + "' is not supported";
}

PadSetup pad_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const std::string reason = pad_check(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const std::string mode_name = ctx.attr_string("mode", "constant");
  const PadMode mode = mode_name == "reflect" ? PadMode::Reflect
                       : mode_name == "edge"  ? PadMode::Edge
                       : mode_name == "wrap"  ? PadMode::Wrap
                                              : PadMode::Constant;
  PadSetup s;
  std::vector<int64_t> pads;
  s.value = Tensor::scalar<float>(DType::Float32, 0.0f);
  if (ctx.opset() < 11) {
    const char* name = ctx.opset() < 2 ? "paddings" : "pads";
    if (!ctx.node().has_attr(name)) fail(where, ": required attribute '", name, "' is missing");
    pads = ctx.attr_ints(name);
    s.value = Tensor::scalar<float>(DType::Float32, ctx.attr_float("value", 0.0f));
  } else {
    pads = read_int_tensor(ctx.input(1), where, "input 'pads'");
    if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
      const Tensor& cv = ctx.input(2);
      if (cv.numel() != 1) fail(where, ": constant_value must hold one value, got ", cv.describe());
      s.value = cv;
    }
  }
  std::vector<int64_t> axes;
  if (ctx.opset() >= 18 && ctx.has_input(3)) {
    axes = normalize_axes(read_int_tensor(ctx.input(3), where, "input 'axes'"), rank, where);
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
  for (int64_t d = 0; d < rank; ++d) {
    const size_t k = static_cast<size_t>(d);
    if (before[k] > (int64_t{1} << 40) || after[k] > (int64_t{1} << 40) || before[k] < -(int64_t{1} << 40) ||
        after[k] < -(int64_t{1} << 40))
      fail(where, ": pads ", shape_str(pads), " are out of range");
    s.maps.push_back(index_map(x.dim(d), before[k], after[k], mode, d, where));
    s.out.push_back(static_cast<int64_t>(s.maps.back().size()));
  }
  shape_numel(s.out);
  return s;
}

}  // namespace reforge::ops
