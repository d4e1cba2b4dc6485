// The derivations binding tries for a source that no indexed form matched: what exporters make
// when they fold a lookup or a broadcast of a weight into a new constant.
//
//  * broadcast: the source is constant along some axes (an Expand of a smaller tensor, e.g. a
//    class token expanded over the batch); those axes are reduced to one element first and the
//    binding ends in Expand;
//  * gather or slice along one axis of a checkpoint tensor, with its other axes in any order:
//    each row of the source (over the axes the checkpoint tensor keeps) must equal exactly one
//    slice of the checkpoint tensor along that axis; the recovered index becomes an int64 literal
//    of the binding (a position table cut to the exported length is a Slice at any offset, a
//    relative-position bias looked up through a [S,S] bucket index is a Gather);
//  * a permutation of any rank (Transpose), and a cast between float32 and bfloat16/float16;
//  * size-1 axes anywhere (Reshape / Unsqueeze / Squeeze are free: the result is reshaped).
//
// Every candidate is confirmed by replaying the binding with transforms::apply_binding, the code a
// checkpoint refit runs, and comparing bit for bit: a derivation that is not exact is no binding.
// A row that equals several slices of the checkpoint tensor makes that candidate fail: an index
// chosen among equal rows would be a guess.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "plan/plan.h"
#include "refit/safetensors.h"

namespace reforge::build {

// True when every element of `t` has the same bytes (tensors of one element included).
bool all_equal(const Tensor& t);

// Bindings of `v` derived by the forms above from single checkpoint tensors, by checkpoint
// name; each confirmed bit for bit. `v` must not be all-equal (see broadcast_equal).
std::map<std::string, plan::Binding> derive_bindings(const Tensor& v, const refit::Checkpoint& ckpt);

// For an all-equal `v`: every checkpoint tensor of fewer elements whose elements all equal v's
// value (after a widening cast) and whose shape broadcasts to v's (an Expand of it), by name.
// Tensors of v's element count are found by the index (identity / reshape).
std::map<std::string, plan::Binding> broadcast_bindings(const Tensor& v, const refit::Checkpoint& ckpt);

// For an all-equal `v` that no binding derives: the all-equal checkpoint tensors of v's value
// whose shape differs from v's (size-1 axes aside) along at most one axis. A concatenation or a
// slice of them could have made v (zero biases fused into one), and which cannot be told by
// value, so v is neither bound nor structural.
std::vector<std::string> related_constants(const Tensor& v, const refit::Checkpoint& ckpt);

// The axis along which `v` is the checkpoint tensor `t` scaled slice by slice (each index c
// along it one factor s_c: v[..c..] = t[..c..] * s_c, to float rounding), or -1. `t` is v's
// shape, or (2-D) its transpose. Folding a BatchNorm or any per-channel scale into a
// Conv/Gemm/MatMul weight makes this; another checkpoint's tensor of the same name is no such
// scale (two elements of one slice already disagree). Evidence, not a binding: the factors
// come from tensors binding cannot replay, so a source shown folded stays unbound. Needs a
// slice of at least two nonzero elements for each axis it accepts.
int scale_axis(const Tensor& v, const Tensor& t);

}  // namespace reforge::build
