// Numpy-style (ONNX "multidirectional") broadcasting for elementwise kernels.
//
// Two layers:
//   * broadcast_shapes(): the output shape of operands broadcast together, or an Error saying
//     which dimension disagrees. Ranks are right-aligned; a dimension of 1 stretches; a 0-sized
//     dimension only pairs with 0 or 1.
//   * BroadcastLayout<N> + for_each_run(): walks the output in contiguous "runs" and gives, for
//     each run, the element offset into every operand and whether that operand advances (inner
//     stride 1) or stays put (inner stride 0, a broadcast scalar) along the run. The layout drops
//     size-1 output dims and merges adjacent dims that every operand traverses contiguously, so
//     same-shape operands become a single run, a scalar operand has inner stride 0, and a
//     trailing-dim broadcast ([N,C] op [C]) is N runs of length C. Kernels then write a plain
//     `for (i < n)` loop that the compiler vectorizes; broadcast_map() does that for you.
//
// Typical use (binary op, output already allocated with the broadcast shape):
//
//   Shape os = broadcast_shapes({a.shape(), b.shape()}, ctx.node().label());
//   Tensor& out = ctx.allocate_output(0, dtype, os);
//   broadcast_map(out.mutable_data<float>(), os, [](float x, float y) { return x + y; },
//                 Operand{a.data<float>(), a.shape()}, Operand{b.data<float>(), b.shape()});
//
// Expand is broadcast_map with one operand and an identity op.
//
// Invariants: operands are dense C-ordered buffers of their own shape (any alignment); the
// output is dense C-ordered of the output shape; it may alias an operand that has the full
// output shape (in-place folds), never a broadcast one. Every operand shape must broadcast to the
// output shape (checked: an Error otherwise; unidirectional broadcasting such as Expand or
// PRelu's slope is just "operand broadcasts to a given output shape"). Runs are processed in
// parallel on the kernel thread pool (core/thread_pool.h) when the output is large, so the
// callback must be thread-safe and must not throw (record failures in a flag and throw after the
// loop).
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace reforge::ops {

// Broadcast output shape of `shapes` (numpy rules). `where` (e.g. ctx.node().label()) prefixes
// the error message: "node 'x' (Add): shapes [2,3] and [4] are not broadcastable (dimension -1:
// 3 in [2,3] vs 4 in [4])". At least one shape is required.
Shape broadcast_shapes(const std::vector<Shape>& shapes, const std::string& where = "");

// True when `from` broadcasts to exactly `to` (unidirectional: `to` is not changed).
bool broadcasts_to(const Shape& from, const Shape& to);

// ONNX opset < 7 "limited broadcasting" of binary ops (Add, Mul, And, Equal, Pow, ...): with
// attribute broadcast=1, B's dims line up with A's starting at `axis` (or trailing-aligned when
// the node has no axis). Returns B's shape padded with 1s so that numpy rules (above) give the
// same result; throws an Error (prefixed with `where`) when B does not fit inside A.
Shape legacy_broadcast_shape(const Shape& a, const Shape& b, bool has_axis, int64_t axis, const std::string& where);

// Shapes of a two-input elementwise node (inputs 0 and 1): the operand shapes as numpy rules
// see them (B's rewritten for opset < 7 nodes with broadcast=1) and the broadcast output shape.
// Errors name the node.
struct BinaryShapes {
  Shape a, b, out;
};
BinaryShapes binary_shapes(const KernelContext& ctx);

// Output elements above which for_each_run() splits the work across threads.
inline constexpr int64_t kParallelElements = int64_t{1} << 16;

// Iteration plan of an output shape over N operands broadcast to it.
template <size_t N>
struct BroadcastLayout {
  int64_t numel = 0;                                  // output elements
  int64_t inner = 1;                                  // length of the innermost merged dimension
  std::array<int64_t, N> inner_stride{};              // per operand: 1 = advances along a run, 0 = broadcast
  std::vector<int64_t> outer_dims;                    // merged dims outside `inner`, outermost first
  std::array<std::vector<int64_t>, N> outer_strides;  // per operand, element strides of outer_dims

  // Throws an Error (prefixed with `where`) when an operand does not broadcast to `out`.
  BroadcastLayout(const Shape& out, const std::array<Shape, N>& ins, const std::string& where = "");

  // Element offsets into each operand of the start of row `row` (row = index over outer_dims).
  void row_offsets(int64_t row, std::array<int64_t, N>& off) const {
    for (size_t k = 0; k < N; ++k) off[k] = 0;
    for (size_t d = outer_dims.size(); d-- > 0;) {
      int64_t i = row % outer_dims[d];
      row /= outer_dims[d];
      for (size_t k = 0; k < N; ++k) off[k] += i * outer_strides[k][d];
    }
  }
};

// Calls f(out_offset, in_offsets, n) for contiguous output runs [out_offset, out_offset + n)
// covering the whole output once; operand k's elements for the run are
// in_offsets[k] + i * layout.inner_stride[k], i < n. Parallel (thread pool) above kParallelElements.
template <size_t N, typename F>
void for_each_run(const BroadcastLayout<N>& L, F&& f) {
  const int64_t total = L.numel;
  if (total == 0) return;
  const int64_t inner = L.inner;
  const size_t nd = L.outer_dims.size();
  // Work is split into chunks of whole elements; a chunk may start or end mid-row.
  const int64_t chunk = total > kParallelElements ? int64_t{1} << 15 : total;
  const int64_t nchunks = (total + chunk - 1) / chunk;
  parallel_tasks(nchunks, nchunks > 1 ? omp_get_max_threads() : 1, [&](int64_t c) {
    int64_t e = c * chunk;
    const int64_t end = std::min(total, e + chunk);
    int64_t row = e / inner;
    int64_t col = e % inner;
    // Odometer over outer_dims so consecutive rows cost additions, not divisions.
    std::vector<int64_t> idx(nd);
    std::array<int64_t, N> base{};
    {
      int64_t r = row;
      for (size_t d = nd; d-- > 0;) {
        idx[d] = r % L.outer_dims[d];
        r /= L.outer_dims[d];
        for (size_t k = 0; k < N; ++k) base[k] += idx[d] * L.outer_strides[k][d];
      }
    }
    std::array<int64_t, N> off;
    while (e < end) {
      for (size_t k = 0; k < N; ++k) off[k] = base[k] + col * L.inner_stride[k];
      const int64_t n = std::min(inner - col, end - e);
      f(e, off, n);
      e += n;
      col = 0;
      for (size_t d = nd; d-- > 0;) {  // next row
        for (size_t k = 0; k < N; ++k) base[k] += L.outer_strides[k][d];
        if (++idx[d] < L.outer_dims[d]) break;
        for (size_t k = 0; k < N; ++k) base[k] -= L.outer_dims[d] * L.outer_strides[k][d];
        idx[d] = 0;
      }
    }
  });
}

// A typed operand for broadcast_map: a dense buffer and its shape.
template <typename T>
struct Operand {
  const T* data;
  Shape shape;
};
template <typename T>
Operand(const T*, Shape) -> Operand<T>;
template <typename T>
Operand(T*, Shape) -> Operand<T>;

namespace detail {
// Inner loops with the inner strides resolved outside the loop for the 1- and 2-operand
// patterns, so the compiler vectorizes and hoists broadcast scalars.
template <typename TOut, typename Op, typename TA>
inline void run1(TOut* out, int64_t n, Op& op, int64_t sa, const TA* a) {
  if (sa == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i]);
  } else {
    const TA x = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = op(x);
  }
}
template <typename TOut, typename Op, typename TA, typename TB>
inline void run2(TOut* out, int64_t n, Op& op, int64_t sa, int64_t sb, const TA* a, const TB* b) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  } else if (sa == 1) {
    const TB y = b[0];
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], y);
  } else if (sb == 1) {
    const TA x = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = op(x, b[i]);
  } else {
    const auto v = op(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = v;
  }
}
template <typename TOut, typename Op, typename Ptrs, size_t N, size_t... I>
inline void run_n(TOut* out, int64_t n, Op& op, const std::array<int64_t, N>& st, const std::array<int64_t, N>& off,
                  const Ptrs& ptrs, std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) out[i] = op(std::get<I>(ptrs)[off[I] + i * st[I]]...);
}
}  // namespace detail

// out[i] = op(operands broadcast to out_shape...). `op` takes the operands' element types and
// returns something assignable to TOut; it must not throw. Throws an Error when an operand does
// not broadcast to out_shape (compute out_shape with broadcast_shapes(..., label) first to get
// the node's name in the message).
template <typename TOut, typename Op, typename... T>
void broadcast_map(TOut* out, const Shape& out_shape, Op op, const Operand<T>&... ins) {
  static_assert(sizeof...(T) >= 1, "broadcast_map needs at least one operand");
  constexpr size_t N = sizeof...(T);
  BroadcastLayout<N> L(out_shape, std::array<Shape, N>{ins.shape...});
  const auto ptrs = std::make_tuple(ins.data...);
  for_each_run(L, [&](int64_t o, const std::array<int64_t, N>& off, int64_t n) {
    Op local = op;  // a private copy per run keeps the callback thread-safe
    if constexpr (N == 1) {
      detail::run1(out + o, n, local, L.inner_stride[0], std::get<0>(ptrs) + off[0]);
    } else if constexpr (N == 2) {
      detail::run2(out + o, n, local, L.inner_stride[0], L.inner_stride[1], std::get<0>(ptrs) + off[0],
                   std::get<1>(ptrs) + off[1]);
    } else {
      detail::run_n(out + o, n, local, L.inner_stride, off, ptrs, std::make_index_sequence<N>{});
    }
  });
}

// ---- implementation of the layout (header-only so kernels in any file can instantiate it) ----

template <size_t N>
BroadcastLayout<N>::BroadcastLayout(const Shape& out, const std::array<Shape, N>& ins, const std::string& where) {
  numel = shape_numel(out);
  const size_t rank = out.size();
  // Full-rank element strides per operand; 0 where the operand is broadcast.
  std::array<std::vector<int64_t>, N> strides;
  for (size_t k = 0; k < N; ++k) {
    const Shape& s = ins[k];
    if (!broadcasts_to(s, out))
      fail(where, where.empty() ? "" : ": ", "operand ", k, " of shape ", shape_str(s), " does not broadcast to ",
           shape_str(out));
    strides[k].assign(rank, 0);
    int64_t st = 1;
    for (size_t j = 0; j < s.size(); ++j) {
      size_t sd = s.size() - 1 - j;
      size_t od = rank - 1 - j;
      strides[k][od] = (s[sd] == 1 && out[od] != 1) ? 0 : st;
      st *= s[sd];
    }
  }
  // Drop size-1 output dims, then merge dim d into the previous kept one when every operand
  // steps through both contiguously (stride[prev] == stride[d] * dim[d], which includes 0 == 0).
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, N> st;
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = st[k].back() == strides[k][d] * out[d];
    if (merge) {
      dims.back() *= out[d];
      for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
    } else {
      dims.push_back(out[d]);
      for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
    }
  }
  if (dims.empty()) {
    inner = 1;
    for (size_t k = 0; k < N; ++k) inner_stride[k] = 0;
  } else {
    inner = dims.back();
    dims.pop_back();
    for (size_t k = 0; k < N; ++k) {
      inner_stride[k] = st[k].back();
      st[k].pop_back();
    }
  }
  if (inner == 0) inner = 1;  // empty output: numel == 0 and nothing is iterated
  outer_dims = std::move(dims);
  outer_strides = std::move(st);
}

}  // namespace reforge::ops
