// Compress and Unique: ops whose output size depends on the input's values.
//
// Compress keeps the slices along `axis` (of the flattened input without one) whose entry of the
// 1-D bool condition is true; a condition shorter than the axis drops the slices past its end,
// and a true entry past the end of the axis is an error.
//
// Unique finds the distinct elements (or, with `axis`, the distinct slices along that axis) as
// numpy.unique does: Y in ascending (lexicographic, for slices) order when `sorted` (default), else
// in order of first occurrence; `indices` the first occurrence of each, `inverse_indices` for
// each input element (slice) the position of its value in Y, and `counts`. Elements compare by
// value in their compute type: for floats -0 equals +0, and NaNs sort last and equal each other
// (numpy.unique's equal_nan default).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/dispatch.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

void compress_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  REFORGE_CHECK(cond.dtype() == DType::Bool && cond.rank() == 1, label, ": condition must be a 1-D bool tensor, got ",
                cond.describe());
  const bool has_axis = ctx.node().has_attr("axis");
  Shape shape = x.shape();
  int64_t axis = 0;
  if (has_axis) {
    axis = normalize_axis(ctx.attr_int("axis", 0), x.rank(), label);
  } else {
    shape = {x.numel()};
  }
  const int64_t n = shape[static_cast<size_t>(axis)];
  const uint8_t* c = cond.data<uint8_t>();
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (c[i] == 0) continue;
    REFORGE_CHECK(i < n, label, ": condition entry ", i, " is true but the axis has only ", n, " slices");
    keep.push_back(i);
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) inner *= shape[i];
  Shape out_shape = shape;
  out_shape[static_cast<size_t>(axis)] = static_cast<int64_t>(keep.size());
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out_shape);
  REFORGE_CHECK(dtype_size(x.dtype()) > 0, label, ": element type ", dtype_name(x.dtype()), " is not supported");
  const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype());
  const auto* src = static_cast<const uint8_t*>(static_cast<const void*>(x.data<uint8_t>()));
  auto* dst = y.mutable_data<uint8_t>();
  const int64_t k = static_cast<int64_t>(keep.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(dst + static_cast<size_t>(o * k + j) * row, src + static_cast<size_t>(o * n + keep[j]) * row, row);
}

// Three-way compare of two values in numpy's sort order (NaN after everything).
template <typename C>
int compare_value(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool an = a != a, bn = b != b;
    if (an || bn) return an && bn ? 0 : (an ? 1 : -1);
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

template <typename T>
void unique_typed(KernelContext& ctx, const Tensor& x, bool has_axis, int64_t axis, bool sorted) {
  // View as [outer, n, inner]: the n slices along the axis, each `outer * inner` elements.
  Shape shape = has_axis ? x.shape() : Shape{x.numel()};
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t n = shape[static_cast<size_t>(axis)];
  const T* xs = x.data<T>();
  auto cmp_slices = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        const int r = compare_value(to_compute(xs[(o * n + a) * inner + j]), to_compute(xs[(o * n + b) * inner + j]));
        if (r != 0) return r;
      }
    return 0;
  };
  // Stable sort of the slice indices, then groups of equal slices: the first of a group is the
  // first occurrence.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp_slices(a, b) < 0; });
  auto equal_slices = [&](int64_t a, int64_t b) { return cmp_slices(a, b) == 0; };
  std::vector<int64_t> first, counts, inverse(static_cast<size_t>(n));
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || !equal_slices(order[i - 1], order[i])) {
      first.push_back(order[i]);
      counts.push_back(0);
    }
    inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(first.size()) - 1;
    ++counts.back();
  }
  const int64_t u = static_cast<int64_t>(first.size());
  std::vector<int64_t> pos(static_cast<size_t>(u));  // output position of each sorted group
  std::iota(pos.begin(), pos.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(static_cast<size_t>(u));
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return first[a] < first[b]; });
    for (int64_t i = 0; i < u; ++i) pos[static_cast<size_t>(by_first[i])] = i;
  }
  std::vector<int64_t> out_first(static_cast<size_t>(u)), out_counts(static_cast<size_t>(u));
  for (int64_t g = 0; g < u; ++g) {
    out_first[static_cast<size_t>(pos[g])] = first[g];
    out_counts[static_cast<size_t>(pos[g])] = counts[g];
  }
  Shape y_shape = shape;
  y_shape[static_cast<size_t>(axis)] = u;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), y_shape);
  T* ys = y.mutable_data<T>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t g = 0; g < u; ++g)
      std::memcpy(ys + (o * u + g) * inner, xs + (o * n + out_first[g]) * inner,
                  static_cast<size_t>(inner) * sizeof(T));
  auto write = [&](size_t i, const std::vector<int64_t>& v) {
    if (!ctx.output_wanted(i)) return;
    Tensor& t = ctx.allocate_output_uninit(i, DType::Int64, Shape{static_cast<int64_t>(v.size())});
    if (!v.empty()) std::memcpy(t.mutable_data<int64_t>(), v.data(), v.size() * sizeof(int64_t));
  };
  write(1, out_first);
  std::vector<int64_t> out_inverse(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out_inverse[static_cast<size_t>(i)] = pos[inverse[i]];
  write(2, out_inverse);
  write(3, out_counts);
}

void unique_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const bool has_axis = ctx.node().has_attr("axis");
  const int64_t axis = has_axis ? normalize_axis(ctx.attr_int("axis", 0), x.rank(), label) : 0;
  const bool sorted = ctx.attr_int("sorted", 1) != 0;
  if (x.dtype() == DType::Bool) {
    unique_typed<uint8_t>(ctx, x, has_axis, axis, sorted);
    return;
  }
  dispatch_numeric(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        unique_typed<T>(ctx, x, has_axis, axis, sorted);
      },
      label.c_str());
}

}  // namespace

void register_select_ops(OpRegistry& r) {
  r.add({"", "Compress", 9, INT_MAX, compress_kernel, nullptr});
  r.add({"", "Unique", 11, INT_MAX, unique_kernel, nullptr});
}

}  // namespace reforge::ops
