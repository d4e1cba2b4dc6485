// The CUDA kernel sweep (ggml's test-backend-ops is the model): tests/cuda_sweep_test.cc
// enumerates every kernel registered for the "cuda" backend at run time and runs each one's
// generated cases on the GPU against the op's reference kernel (src/ops) on the same inputs,
// held to a normalized mean squared error per dtype, to equality for integer and bool outputs,
// and to the reference's NaN and infinity positions.
//
// This header is what the generators (tests/cuda_sweep/*.cc, one file per op family) see: a
// Gen, handed the op's opset, makes cases of that op with fixed-seed random shapes (several
// ranks, odd sizes, broadcasting, empty tensors where the op allows them), each dtype the CUDA
// kernel takes, and attributes drawn from their valid ranges; structured inputs (indices, axes,
// shapes) are made valid by the generator. A generator is registered per (domain, op type), and
// answers for every opset range the op is registered with. A CUDA kernel of an op without one
// fails the sweep's coverage test, so a new kernel comes with its cases.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::cuda_sweep {

using Attrs = std::vector<ir::Attribute>;

// One run of the op: a node and the tensors its inputs take.
struct Case {
  ir::Node node;
  std::vector<Tensor> inputs;  // inputs[i] feeds node.inputs[i]; an undefined Tensor: absent
};

inline const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
inline const std::vector<DType> kInts = {DType::Int8,  DType::Int16,  DType::Int32,  DType::Int64,
                                         DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64};
// Every float and integer type (no bool).
std::vector<DType> numeric_types();
// Every standard type: numeric and bool.
std::vector<DType> all_types();

class Gen {
 public:
  // Cases of the op at `opset`. The randomness is seeded by (domain, op, opset) alone, so every
  // case is the same on every run and does not depend on which other ops are registered.
  Gen(std::string domain, std::string op, int opset);

  const std::string& domain() const { return domain_; }
  const std::string& op() const { return op_; }
  int opset() const { return opset_; }

  // Uniform in [lo, hi].
  int64_t between(int64_t lo, int64_t hi);
  bool coin() { return between(0, 1) == 1; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(between(0, static_cast<int64_t>(v.size()) - 1))];
  }
  // `n` of v's elements (all when it has no more), chosen at random, in v's order: the cases of
  // a type other than an op's first, so that every type runs without every shape.
  template <typename T>
  std::vector<T> some(const std::vector<T>& v, size_t n) {
    std::vector<T> out;
    for (size_t i = 0; i < v.size(); ++i)
      if (static_cast<size_t>(between(0, static_cast<int64_t>(v.size() - i) - 1)) < n - out.size()) out.push_back(v[i]);
    return out;
  }

  // A random shape of `rank` dimensions, each in [lo, hi].
  Shape shape(int rank, int64_t lo = 1, int64_t hi = 7);
  // Shapes for elementwise-like ops: one per rank 0..4, a size past one block, an empty one.
  std::vector<Shape> shapes(int min_rank = 0, int max_rank = 4);
  // A shape that broadcasts to `s`: some dimensions set to 1, some leading ones dropped.
  Shape broadcast_of(const Shape& s);

  // Values of `dtype`: floats uniform in [lo, hi); integers that rounded after scaling by 4
  // (unsigned clamp at 0); bool about half true.
  Tensor random(DType dtype, const Shape& shape, float lo = -2.0f, float hi = 2.0f);
  // `t` with its first elements replaced by NaN, +-inf, +-0 and halfway points (floats only).
  static Tensor with_specials(const Tensor& t);
  // Indices in [-dim, dim) (both signs; [0, dim) when `negative` is false), int32 or int64.
  Tensor indices(DType dtype, const Shape& shape, int64_t dim, bool negative = true);
  // A 1-D int64 tensor (or of `dtype`).
  static Tensor ints(const std::vector<int64_t>& v, DType dtype = DType::Int64);
  // A rank-0 tensor of `dtype` holding v.
  static Tensor scalar(DType dtype, double v);

  // Adds a case of the op under test: inputs "x0", "x1", ... (an undefined tensor leaves that
  // input absent), outputs "y0" ... "y<outputs-1>". Returns it for further changes.
  Case& add(std::vector<Tensor> inputs, Attrs attrs = {}, size_t outputs = 1);
  // Sets output i of `c` to absent (an optional output not asked for).
  static void drop_output(Case& c, size_t i) { c.node.outputs[i].clear(); }

  std::vector<Case>& cases() { return cases_; }

 private:
  std::string domain_, op_;
  int opset_;
  std::mt19937 rng_;
  std::vector<Case> cases_;
};

// A generator of one (domain, op type): makes the cases for gen.opset(). Making none for a
// registration counts as no coverage of it.
using Generator = std::function<void(Gen&)>;

// The opset every registration is swept at besides its first (clamped to the registration's
// range): today's exporters' forms of ops registered since an early opset.
inline constexpr int kModernOpset = 21;

struct OpCases {
  std::string family;  // the test that runs it: CudaSweep.<family>
  std::string domain;
  std::string op;
  Generator gen;
  // The opsets where the op's form changed (an attribute became an input, an attribute or input
  // was added): a registration is swept at its first opset, at each of these inside its range, and
  // at kModernOpset.
  std::vector<int> versions = {};
};

// Each family file appends its generators.
void add_elementwise_cases(std::vector<OpCases>& out);  // cuda_sweep/elementwise.cc
void add_unary_cases(std::vector<OpCases>& out);        // cuda_sweep/unary.cc
void add_layout_cases(std::vector<OpCases>& out);       // cuda_sweep/layout.cc
void add_tensor_cases(std::vector<OpCases>& out);       // cuda_sweep/tensor.cc
void add_reduce_cases(std::vector<OpCases>& out);       // cuda_sweep/reduce.cc
void add_nn_cases(std::vector<OpCases>& out);           // cuda_sweep/nn.cc
void add_norm_cases(std::vector<OpCases>& out);         // cuda_sweep/norm.cc
void add_transformer_cases(std::vector<OpCases>& out);  // cuda_sweep/transformer.cc

// Every generator, from every family.
const std::vector<OpCases>& all_generators();

}  // namespace reforge::cuda_sweep
