// Shared helpers of the tensor op family (shape, layout, gather/scatter, misc).
//
// Most ops of this family move elements without looking at them, so their kernels dispatch on
// the element *size* (1, 2, 4 or 8 bytes) rather than on the dtype: one instantiation serves
// int8/uint8/bool, another float16/bfloat16/int16, and so on. strided_copy() is the one
// data-movement primitive behind Transpose, Slice, Expand, Tile, DepthToSpace and SpaceToDepth:
// each of them is "walk the output in C order, read the source through per-dimension strides".
// Values read from input tensors (axes, indices, shapes) are untrusted: every helper here checks
// them and throws an Error naming the node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// Registration entry points of the family's files; register_tensor_ops() calls them all.
void register_shape_ops(OpRegistry& r);           // shape_ops.cc
void register_layout_ops(OpRegistry& r);          // layout_ops.cc
void register_pad_ops(OpRegistry& r);             // pad_ops.cc
void register_gather_scatter_ops(OpRegistry& r);  // gather_scatter.cc
void register_tensor_misc_ops(OpRegistry& r);     // tensor_misc.cc
void register_select_ops(OpRegistry& r);          // select_ops.cc
void register_image_ops(OpRegistry& r);           // image_ops.cc
void register_generator_ops(OpRegistry& r);       // generator_ops.cc

// Unsigned integer type of a given byte size, used to move elements of any dtype.
template <size_t Bytes>
struct UIntOfSize;
template <>
struct UIntOfSize<1> {
  using type = uint8_t;
};
template <>
struct UIntOfSize<2> {
  using type = uint16_t;
};
template <>
struct UIntOfSize<4> {
  using type = uint32_t;
};
template <>
struct UIntOfSize<8> {
  using type = uint64_t;
};

// Calls f(TypeTag<uintN_t>) for the element size of `t`; other sizes are an Error naming `where`,
// its message ending with `refusal_tail` (a backend says where the type is not supported).
template <typename F>
decltype(auto) dispatch_bytes(DType t, F&& f, const std::string& where, const char* refusal_tail = "") {
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
      fail(where, ": element type ", dtype_name(t), " is not supported", refusal_tail);
  }
}

// `axis` in [-rank, rank) mapped to [0, rank); an Error naming `where` otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& where);

// The values of an integer tensor (axes, shapes, pads, repeats...); an Error naming `where` and
// `what` if it is not of an integer type.
std::vector<int64_t> read_int_tensor(const Tensor& t, const std::string& where, const char* what);

// Normalizes a list of axes against `rank` and rejects duplicates.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const std::string& where);

// Row-major element strides of `shape`.
std::vector<int64_t> contiguous_strides(const Shape& shape);

// dst (dense, C order, shape `out_shape`) [i0..in] = src[offset + sum_d i_d * src_strides[d]].
// Strides may be 0 (broadcast) or negative (reversed Slice). `elem` is the element size. The
// caller guarantees every addressed source element is inside the source buffer.
void strided_copy(void* dst, const void* src, size_t elem, const Shape& out_shape,
                  const std::vector<int64_t>& src_strides, int64_t src_offset);

}  // namespace reforge::ops
