// The optimizer steps of the ai.onnx.preview.training domain: Adagrad, Adam and Momentum
// (standard and Nesterov). Each node updates n tensors at once; its inputs are R (the learning
// rate, a float scalar), T (the update count, an int64 scalar), then n tensors X, n gradients G
// and the n state tensors of the method (Adagrad: H; Momentum: V; Adam: V, then H), and its
// outputs the n new X, then the n new state tensors in the same order. Tuple i is independent
// of the others and may have its own float type; every tensor of a tuple has X's type and shape.
//
// The element formulas are the spec's (docs/Operators.md of ONNX), evaluated per element in
// double from the inputs and attributes and rounded once to X's type:
//   Adagrad:  r = R / (1 + T * decay_factor);  g = norm_coefficient * X + G;  H' = H + g * g;
//             X' = X - r * g / (sqrt(H') + epsilon)
//   Momentum: g = norm_coefficient * X + G;  b = T > 0 ? beta : 1;  V' = alpha * V + b * g;
//             X' = X - R * V' (standard),  X' = X - R * (g + alpha * V') (nesterov)
//   Adam:     g = norm_coefficient * X + G;  V' = alpha * V + (1 - alpha) * g;
//             H' = beta * H + (1 - beta) * g * g;
//             r = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R;
//             X' = (1 - norm_coefficient_post) * (X - r * V' / (sqrt(H') + epsilon))
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

const char* const kTraining = "ai.onnx.preview.training";

enum class Method { kAdagrad, kMomentum, kAdam };

// Tensors per optimized tuple in the inputs: X, G and the method's state tensors.
size_t tuple_inputs(Method m) { return m == Method::kAdam ? 4 : 3; }

// The number of optimized tensors of a node, from its input and output counts (the schema's
// structure), or "" and n when they fit.
std::string tuple_count(const ir::Node& node, Method m, size_t& n) {
  const size_t k = tuple_inputs(m);
  if (node.inputs.size() < 2 + k || (node.inputs.size() - 2) % k != 0)
    return str_cat("expects R, T and groups of ", k, " tensors (X, G", m == Method::kAdam ? ", V, H" : ", state",
                   ") as inputs, got ", node.inputs.size(), " inputs");
  n = (node.inputs.size() - 2) / k;
  if (node.outputs.size() != n * (k - 1))
    return str_cat(n, " optimized tensors need ", n * (k - 1), " outputs, got ", node.outputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i)
    if (node.inputs[i].empty()) return str_cat("input ", i, " is absent; every input is required");
  return "";
}

std::string check_optimizer(const ir::Node& node, Method m) {
  size_t n = 0;
  if (std::string why = tuple_count(node, m, n); !why.empty()) return why;
  if (m == Method::kMomentum) {
    for (const char* a : {"alpha", "beta", "mode", "norm_coefficient"})
      if (!node.has_attr(a)) return str_cat("attribute '", a, "' is required");
    const std::string mode = node.attr_string("mode", "");
    if (mode != "standard" && mode != "nesterov")
      return str_cat("mode '", mode, "' is neither 'standard' nor 'nesterov'");
  }
  return "";
}

struct Coefficients {
  double r = 0;   // learning rate
  int64_t t = 0;  // update count
  double alpha = 0, beta = 0, epsilon = 0, norm = 0, norm_post = 0, decay = 0;
  bool nesterov = false;
};

double scalar_of(const Tensor& t, const std::string& label, const char* what, bool want_float) {
  REFORGE_CHECK(t.numel() == 1 && t.rank() <= 1, label, ": ", what, " must be a scalar, got ", t.describe());
  if (want_float)
    REFORGE_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64, label, ": ", what,
                  " must be float or double, got ", t.describe());
  else
    REFORGE_CHECK(t.dtype() == DType::Int64, label, ": ", what, " must be int64, got ", t.describe());
  return t.as_double(0);
}

// One tuple's update, in double, written in X's type.
template <typename T>
void update_tuple(Method m, const Coefficients& c, const std::vector<const Tensor*>& in, std::vector<Tensor*>& out) {
  const int64_t count = in[0]->numel();
  const T* x = in[0]->data<T>();
  const T* g = in[1]->data<T>();
  const T* s1 = in[2]->data<T>();
  const T* s2 = m == Method::kAdam ? in[3]->data<T>() : nullptr;
  T* x_new = out[0]->mutable_data<T>();
  T* s1_new = out[1]->mutable_data<T>();
  T* s2_new = m == Method::kAdam ? out[2]->mutable_data<T>() : nullptr;
  switch (m) {
    case Method::kAdagrad: {
      const double r = c.r / (1.0 + static_cast<double>(c.t) * c.decay);
      for (int64_t i = 0; i < count; ++i) {
        const double xv = x[i], gr = c.norm * xv + static_cast<double>(g[i]);
        const double h = static_cast<double>(s1[i]) + gr * gr;
        x_new[i] = static_cast<T>(xv - r * gr / (std::sqrt(h) + c.epsilon));
        s1_new[i] = static_cast<T>(h);
      }
      break;
    }
    case Method::kMomentum: {
      const double b = c.t > 0 ? c.beta : 1.0;
      for (int64_t i = 0; i < count; ++i) {
        const double xv = x[i], gr = c.norm * xv + static_cast<double>(g[i]);
        const double v = c.alpha * static_cast<double>(s1[i]) + b * gr;
        x_new[i] = static_cast<T>(c.nesterov ? xv - c.r * (gr + c.alpha * v) : xv - c.r * v);
        s1_new[i] = static_cast<T>(v);
      }
      break;
    }
    case Method::kAdam: {
      const double td = static_cast<double>(c.t);
      const double r = c.t > 0 ? c.r * std::sqrt(1.0 - std::pow(c.beta, td)) / (1.0 - std::pow(c.alpha, td)) : c.r;
      for (int64_t i = 0; i < count; ++i) {
        const double xv = x[i], gr = c.norm * xv + static_cast<double>(g[i]);
        const double v = c.alpha * static_cast<double>(s1[i]) + (1.0 - c.alpha) * gr;
        const double h = c.beta * static_cast<double>(s2[i]) + (1.0 - c.beta) * gr * gr;
        const double moved = xv - r * v / (std::sqrt(h) + c.epsilon);
        x_new[i] = static_cast<T>((1.0 - c.norm_post) * moved);
        s1_new[i] = static_cast<T>(v);
        s2_new[i] = static_cast<T>(h);
      }
      break;
    }
  }
}

void optimizer_kernel(KernelContext& ctx, Method m) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  if (std::string why = check_optimizer(node, m); !why.empty()) fail(label, ": ", why);
  const size_t k = tuple_inputs(m);
  const size_t n = (node.inputs.size() - 2) / k;
  Coefficients c;
  c.r = scalar_of(ctx.input(0), label, "R (the learning rate)", true);
  c.t = static_cast<int64_t>(scalar_of(ctx.input(1), label, "T (the update count)", false));
  c.norm = ctx.attr_float("norm_coefficient", 0.0f);
  c.epsilon = ctx.attr_float("epsilon", 0.0f);
  c.decay = ctx.attr_float("decay_factor", 0.0f);
  c.alpha = ctx.attr_float("alpha", m == Method::kAdam ? 0.9f : 0.0f);
  c.beta = ctx.attr_float("beta", m == Method::kAdam ? 0.999f : 0.0f);
  c.norm_post = ctx.attr_float("norm_coefficient_post", 0.0f);
  c.nesterov = ctx.attr_string("mode", "standard") == "nesterov";
  static const char* const kNames[3][4] = {{"X", "G", "H", ""}, {"X", "G", "V", ""}, {"X", "G", "V", "H"}};
  const char* const* names = kNames[static_cast<int>(m)];
  for (size_t i = 0; i < n; ++i) {
    std::vector<const Tensor*> in;
    for (size_t j = 0; j < k; ++j) in.push_back(&ctx.input(2 + j * n + i));
    const Tensor& x = *in[0];
    REFORGE_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64, label, ": optimized tensor ", i,
                  " (input ", 2 + i, ") must be float or double, got ", x.describe());
    for (size_t j = 1; j < k; ++j)
      REFORGE_CHECK(in[j]->dtype() == x.dtype() && in[j]->shape() == x.shape(), label, ": ", names[j], " of tensor ", i,
                    " (input ", 2 + j * n + i, ") is ", in[j]->describe(), ", expected X's type and shape ",
                    x.describe());
    std::vector<Tensor*> out;
    for (size_t j = 0; j + 1 < k; ++j) out.push_back(&ctx.allocate_output_uninit(j * n + i, x.dtype(), x.shape()));
    if (x.dtype() == DType::Float32)
      update_tuple<float>(m, c, in, out);
    else
      update_tuple<double>(m, c, in, out);
  }
}

}  // namespace

void register_training_ops(OpRegistry& r) {
  const std::pair<const char*, Method> ops[] = {
      {"Adagrad", Method::kAdagrad}, {"Momentum", Method::kMomentum}, {"Adam", Method::kAdam}};
  for (const auto& [name, m] : ops) {
    const Method method = m;
    r.add({kTraining, name, 1, INT_MAX, [method](KernelContext& ctx) { optimizer_kernel(ctx, method); },
           [method](const ir::Node& node) { return check_optimizer(node, method); }});
  }
}

}  // namespace reforge::ops
