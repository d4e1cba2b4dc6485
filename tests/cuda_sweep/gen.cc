// The sweep's case maker (cuda_sweep/sweep.h) and the list of every family's generators.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

uint32_t fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace

std::vector<DType> numeric_types() {
  std::vector<DType> v = kFloats;
  v.insert(v.end(), kInts.begin(), kInts.end());
  return v;
}

std::vector<DType> all_types() {
  std::vector<DType> v = numeric_types();
  v.push_back(DType::Bool);
  return v;
}

Gen::Gen(std::string domain, std::string op, int opset)
    : domain_(std::move(domain)),
      op_(std::move(op)),
      opset_(opset),
      rng_(fnv1a(domain_ + "::" + op_ + "-" + std::to_string(opset))) {}

int64_t Gen::between(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

Shape Gen::shape(int rank, int64_t lo, int64_t hi) {
  Shape s;
  for (int i = 0; i < rank; ++i) s.push_back(between(lo, hi));
  return s;
}

std::vector<Shape> Gen::shapes(int min_rank, int max_rank) {
  std::vector<Shape> v;
  for (int r = min_rank; r <= max_rank; ++r) v.push_back(shape(r, 1, r <= 2 ? 13 : 6));
  // Past one block of threads in the last dimension, and an odd count overall.
  if (max_rank >= 2) v.push_back({2, 1031});
  if (max_rank >= 1 && min_rank <= 2) v.push_back(max_rank >= 2 ? Shape{0, 3} : Shape{0});
  return v;
}

Shape Gen::broadcast_of(const Shape& s) {
  Shape b = s;
  for (auto& d : b)
    if (between(0, 2) == 0) d = 1;
  const int64_t drop = between(0, static_cast<int64_t>(b.size()));
  if (between(0, 1) == 0) b.erase(b.begin(), b.begin() + drop);
  return b;
}

Tensor Gen::random(DType dtype, const Shape& shape, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor f = Tensor::empty(DType::Float32, shape);
  float* p = f.mutable_data<float>();
  for (int64_t i = 0; i < f.numel(); ++i) p[i] = d(rng_);
  if (dtype == DType::Float32) return f;
  if (dtype == DType::Bool) {
    Tensor t = Tensor::empty(DType::Bool, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<uint8_t>()[i] = p[i] > 0.5f * (lo + hi) ? 1 : 0;
    return t;
  }
  if (dtype == DType::Float64 || dtype == DType::Float16 || dtype == DType::BFloat16) return cast_tensor(f, dtype);
  const bool is_unsigned = dtype == DType::UInt8 || dtype == DType::UInt16 || dtype == DType::UInt32 ||
                           dtype == DType::UInt64;
  for (int64_t i = 0; i < f.numel(); ++i) {
    p[i] = std::round(p[i] * 4.0f);
    if (is_unsigned) p[i] = std::max(p[i], 0.0f);
  }
  return cast_tensor(f, dtype);
}

Tensor Gen::with_specials(const Tensor& t) {
  const double inf = std::numeric_limits<double>::infinity();
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), inf, -inf, 0.0, -0.0, 0.5, -2.5, 1.5};
  Tensor f = cast_tensor(t, DType::Float64);
  double* p = f.mutable_data<double>();
  for (int64_t i = 0; i < f.numel() && i < 8; ++i) p[i] = specials[i];
  return cast_tensor(f, t.dtype());
}

Tensor Gen::indices(DType dtype, const Shape& shape, int64_t dim, bool negative) {
  Tensor t = Tensor::empty(DType::Int64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<int64_t>()[i] = between(negative ? -dim : 0, dim - 1);
  return cast_tensor(t, dtype);
}

Tensor Gen::ints(const std::vector<int64_t>& v, DType dtype) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
  return dtype == DType::Int64 ? t : cast_tensor(t, dtype);
}

Tensor Gen::scalar(DType dtype, double v) {
  Tensor t = Tensor::empty(DType::Float64, {});
  t.mutable_data<double>()[0] = v;
  return cast_tensor(t, dtype);
}

Case& Gen::add(std::vector<Tensor> inputs, Attrs attrs, size_t outputs) {
  Case c;
  c.node.name = op_ + "_under_test";
  c.node.op_type = op_;
  c.node.domain = domain_;
  c.node.opset = opset_;
  for (size_t i = 0; i < inputs.size(); ++i) c.node.inputs.push_back(inputs[i].defined() ? "x" + std::to_string(i) : "");
  // Trailing absent inputs are left off, as an exporter writes them.
  while (!c.node.inputs.empty() && c.node.inputs.back().empty()) c.node.inputs.pop_back();
  inputs.resize(c.node.inputs.size());
  for (size_t i = 0; i < outputs; ++i) c.node.outputs.push_back("y" + std::to_string(i));
  for (auto& a : attrs) c.node.attrs[a.name] = std::move(a);
  c.inputs = std::move(inputs);
  cases_.push_back(std::move(c));
  return cases_.back();
}

const std::vector<OpCases>& all_generators() {
  static const std::vector<OpCases> all = [] {
    std::vector<OpCases> v;
    add_elementwise_cases(v);
    add_unary_cases(v);
    add_layout_cases(v);
    add_tensor_cases(v);
    add_reduce_cases(v);
    add_nn_cases(v);
    add_norm_cases(v);
    add_transformer_cases(v);
    return v;
  }();
  return all;
}

}  // namespace reforge::cuda_sweep
