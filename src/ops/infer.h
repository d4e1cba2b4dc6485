// Shape and type inference: what every value of a graph is before any data exists.
//
// Each op's registry entry may carry an InferFn (OpDef::infer). It is pure: from the node, the
// types of its inputs and whatever is known of their contents, it states each output's dtype
// and shape, or fails with an Error naming the node. Dimensions are values: a known size or a
// symbol. Symbols come from the graph's declared inputs ("batch", "seq") or are made fresh by
// the inference for sizes it cannot name (e.g. the result of broadcasting two different symbols
// or a data-dependent count: "unk_7").
//
// Besides types, inference follows the *contents* of small integer tensors as dimensions (the
// output of Shape, what Gather/Slice/Concat/Unsqueeze/arithmetic make of it), so a Reshape whose
// target is computed from Shape(x) gets a symbolic output shape, and a constant shape input is
// read as numbers. Run with every graph input's dimensions fixed (one input signature), the same
// functions give concrete sizes for every value whose size does not depend on data: that is how
// the activation arena is planned per input signature without running the graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::ops {

// A dimension: a known number, or a symbol. In a shape a known number is a size (>= 0); in the
// contents of an integer value (input_dims_value) it may be negative (Reshape's -1, a Slice
// start counted from the end).
class SymDim {
 public:
  SymDim() = default;
  SymDim(int64_t value) : value_(value) {}  // NOLINT: implicit from a number, for brevity
  static SymDim symbol(std::string name) {
    SymDim d;
    d.symbol_ = name.empty() ? std::string("?") : std::move(name);
    return d;
  }
  bool known() const { return symbol_.empty(); }
  int64_t value() const { return value_; }               // 0 when symbolic
  const std::string& symbol() const { return symbol_; }  // "" when known
  std::string str() const { return known() ? std::to_string(value_) : symbol_; }
  bool operator==(const SymDim& o) const { return value_ == o.value_ && symbol_ == o.symbol_; }

 private:
  int64_t value_ = 0;
  std::string symbol_;
};

using SymShape = std::vector<SymDim>;
std::string sym_shape_str(const SymShape& s);  // "[batch,12,seq,64]"

// The inferred type of one value. `rank_known` false: only the dtype is known (the shape of an
// op whose rank depends on data); `shape` is then empty.
struct ValueType {
  DType dtype = DType::Undefined;
  bool rank_known = false;
  SymShape shape;

  static ValueType of(DType dt, SymShape s) { return {dt, true, std::move(s)}; }
  static ValueType unranked(DType dt) { return {dt, false, {}}; }
  bool fully_known() const;  // rank known and every dimension a number
  std::string str() const;   // "float32[batch,12]", "int64[?]" for an unknown rank
  bool operator==(const ValueType&) const = default;
};

class InferContext {
 public:
  virtual ~InferContext() = default;
  virtual const ir::Node& node() const = 0;
  int opset() const { return node().opset; }

  virtual size_t num_inputs() const = 0;
  // False for an absent optional input (name "" or past the end).
  virtual bool has_input(size_t i) const = 0;
  // The input's type; fails (naming the node) when the input is absent.
  virtual const ValueType& input_type(size_t i) const = 0;
  // The input's value when it is a constant of the graph (an initializer, a Constant node, or a
  // value the inference folded), else null.
  virtual const Tensor* input_constant(size_t i) const = 0;
  // The elements of an integer input of rank 0 or 1 as dimensions, when inference knows them
  // (from a constant, or followed through shape arithmetic), else null. A rank-0 value has one
  // element.
  virtual const SymShape* input_dims_value(size_t i) const = 0;

  size_t num_outputs() const { return node().outputs.size(); }
  virtual void set_output(size_t i, ValueType type) = 0;
  // States what output i holds as dimensions (an integer tensor of rank 0 or 1 whose type was
  // set with set_output). Only for shape arithmetic: Shape, Size, Gather, Slice, Concat,
  // Unsqueeze, Squeeze, Cast, Add/Sub/Mul/Div, Reshape, Identity, ConstantOfShape inputs, Range
  // bounds ...
  virtual void set_output_dims_value(size_t i, SymShape dims) = 0;

  // A symbol no other value has, for a size the inference cannot name.
  virtual SymDim fresh_dim() = 0;
  // Throws an Error naming the node: "node 'x' (Op): <message>".
  [[noreturn]] virtual void fail(const std::string& message) const = 0;

  // Attribute shortcuts (the node's typed getters).
  int64_t attr_int(const std::string& n, int64_t def) const { return node().attr_int(n, def); }
  float attr_float(const std::string& n, float def) const { return node().attr_float(n, def); }
  std::string attr_string(const std::string& n, const std::string& def) const { return node().attr_string(n, def); }
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> def = {}) const {
    return node().attr_ints(n, std::move(def));
  }
};

using InferFn = std::function<void(InferContext&)>;

// Helpers the per-op functions share.

// Arithmetic on dimensions, for shape computations (Reshape's -1, Flatten, Concat along an axis,
// Pad, Tile, shape arithmetic on dims values). Known operands give numbers; symbolic ones give an
// expression symbol with a canonical name ("(batch*seq)", "(past+seq)", "(seq-1)"), so that two
// values computed the same way from the same symbols compare equal. Products cancel: dividing
// "(batch*seq*768)" by "(12*seq)" gives "(64*batch)". sym_div is floor division; a divisor known
// to be 0 gives a fresh-looking "(a/0)" symbol, never a number (callers check divisors).
SymDim sym_add(const SymDim& a, const SymDim& b);
SymDim sym_sub(const SymDim& a, const SymDim& b);
SymDim sym_mul(const SymDim& a, const SymDim& b);
SymDim sym_div(const SymDim& a, const SymDim& b);
// The product of the dimensions (1 for a scalar).
SymDim sym_product(const SymShape& s, size_t begin = 0, size_t end = SIZE_MAX);
// Two dimensions that must be equal (a contracted axis, the non-concatenated axes of Concat):
// fails through ctx, with `what`, when both are known and differ; otherwise the more precise of
// the two (a number over a symbol).
SymDim merge_dims(InferContext& ctx, const SymDim& a, const SymDim& b, const std::string& what);
// Reshape's output shape for input shape `in` and target `spec` (entries 0: copy the input's
// dimension unless allowzero; -1: inferred from the element count), failing through ctx when the
// element counts cannot match. `in_known` false: the input's rank is unknown.
SymShape reshape_shape(InferContext& ctx, const SymShape& in, bool in_known, const SymShape& spec, bool allowzero);
// numpy matmul's output shape (1-D operands promoted and their axis removed, batch dimensions
// broadcast), failing through ctx when the contracted dimensions differ.
SymShape matmul_shape(InferContext& ctx, const SymShape& a, const SymShape& b);
// The values of integer input i when every one is known (from a constant or followed dims
// values), else nullopt.
std::optional<std::vector<int64_t>> known_ints(const InferContext& ctx, size_t i);
// The values of float or integer scalar/vector input i when it is a constant, as doubles.
std::optional<std::vector<double>> known_doubles(const InferContext& ctx, size_t i);
// The numpy-style broadcast of two shapes (fails through ctx when they cannot broadcast; two
// different symbols broadcast to a fresh symbol unless one is known to be 1).
SymShape broadcast_shapes(InferContext& ctx, const SymShape& a, const SymShape& b);
// Normalizes a possibly negative axis against `rank`, failing through ctx when out of range.
int64_t normalize_axis(InferContext& ctx, int64_t axis, int64_t rank);

}  // namespace reforge::ops
