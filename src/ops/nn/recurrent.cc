// The recurrent ops RNN, GRU and LSTM (opset 7+; `layout` from 14), one reference kernel for the
// three.
//
// Inputs: X [seq, batch, input] ([batch, seq, input] with layout 1), W [dirs, G*hidden, input],
// R [dirs, G*hidden, hidden], optional B [dirs, 2*G*hidden] (input biases then recurrence
// biases), sequence_lens [batch], initial_h (and LSTM's initial_c) [dirs, batch, hidden]
// ([batch, dirs, hidden] with layout 1) and LSTM's peepholes P [dirs, 3*hidden]. G is the gate
// count: 1 (RNN), 3 (GRU, gates z r h), 4 (LSTM, gates i o f c; peepholes i o f). Outputs: Y
// [seq, dirs, batch, hidden] ([batch, seq, dirs, hidden]), Y_h and LSTM's Y_c shaped like
// initial_h.
//
// Per step, with x the input row and h (c) the state:
//   RNN:  h = f(x W^T + h R^T + Wb + Rb)
//   GRU:  z = f(x Wz^T + h Rz^T + Wbz + Rbz), r likewise, then
//         n = g(x Wh^T + (r * h) Rh^T + Rbh + Wbh)        (linear_before_reset 0)
//         n = g(x Wh^T + r * (h Rh^T + Rbh) + Wbh)        (linear_before_reset 1)
//         h = (1 - z) * n + z * h
//   LSTM: i = f(.. + Pi * c), f = f(.. + Pf * c) (1 - i with input_forget), c~ = g(..),
//         c = f * c + i * c~, o = f(.. + Po * c), h = o * h(c)
// `clip` bounds every gate's pre-activation to [-clip, clip]. The reverse direction walks each
// batch entry's sequence from its last valid step; steps at or past sequence_lens[b] leave the
// state alone and write zeros to Y. Activations default to Sigmoid/Tanh/Tanh (RNN: Tanh); the
// `activations` list names one set per direction, and activation_alpha/beta are consumed in
// that order by the functions that take them. Sums run in double; outputs are rounded once.
#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "core/dispatch.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {
namespace {

enum class Cell { Rnn, Gru, Lstm };

int gate_count(Cell k) { return k == Cell::Rnn ? 1 : k == Cell::Gru ? 3 : 4; }
size_t functions_per_direction(Cell k) { return k == Cell::Rnn ? 1 : k == Cell::Gru ? 2 : 3; }

using Activation = std::function<double(double)>;

bool takes_alpha(const std::string& n) {
  return n == "Affine" || n == "LeakyRelu" || n == "ThresholdedRelu" || n == "ScaledTanh" || n == "HardSigmoid" ||
         n == "Elu";
}
bool takes_beta(const std::string& n) { return n == "Affine" || n == "ScaledTanh" || n == "HardSigmoid"; }

// The activation named `n` with its alpha/beta (defaults where the spec gives them).
std::optional<Activation> make_activation(const std::string& n, std::optional<double> a, std::optional<double> b) {
  if (n == "Sigmoid") return [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  if (n == "Tanh") return [](double v) { return std::tanh(v); };
  if (n == "Relu") return [](double v) { return v > 0 ? v : 0.0; };
  if (n == "Softsign") return [](double v) { return v / (1.0 + std::abs(v)); };
  if (n == "Softplus") return [](double v) { return std::log1p(std::exp(v)); };
  if (n == "Affine") {
    const double al = a.value_or(1.0), be = b.value_or(0.0);
    return [al, be](double v) { return al * v + be; };
  }
  if (n == "LeakyRelu") {
    const double al = a.value_or(0.01);
    return [al](double v) { return v >= 0 ? v : al * v; };
  }
  if (n == "ThresholdedRelu") {
    const double al = a.value_or(1.0);
    return [al](double v) { return v > al ? v : 0.0; };
  }
  if (n == "ScaledTanh") {
    const double al = a.value_or(1.0), be = b.value_or(1.0);
    return [al, be](double v) { return al * std::tanh(be * v); };
  }
  if (n == "HardSigmoid") {
    const double al = a.value_or(0.2), be = b.value_or(0.5);
    return [al, be](double v) { return std::max(0.0, std::min(1.0, al * v + be)); };
  }
  if (n == "Elu") {
    const double al = a.value_or(1.0);
    return [al](double v) { return v >= 0 ? v : al * (std::exp(v) - 1.0); };
  }
  return std::nullopt;
}

int64_t direction_count(const ir::Node& node) {
  const std::string d = node.attr_string("direction", "forward");
  return d == "bidirectional" ? 2 : (d == "forward" || d == "reverse") ? 1 : 0;
}

// The activations of every direction, or the reason they cannot be made.
std::vector<Activation> activations(const ir::Node& node, Cell kind, std::string& error) {
  const int64_t dirs = direction_count(node);
  std::vector<std::string> names;
  if (const ir::Attribute* a = node.attr("activations")) names = a->strings;
  const size_t per = functions_per_direction(kind);
  if (names.empty()) {
    const std::vector<std::string> def = kind == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                                         : kind == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                             : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), def.begin(), def.end());
  }
  if (names.size() != per * static_cast<size_t>(dirs)) {
    error = "activations lists " + std::to_string(names.size()) + " functions, expected " +
            std::to_string(per * static_cast<size_t>(dirs));
    return {};
  }
  const std::vector<float> alphas = node.attr_floats("activation_alpha", {});
  const std::vector<float> betas = node.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const std::string& n : names) {
    std::optional<double> a, b;
    if (takes_alpha(n) && ai < alphas.size()) a = alphas[ai++];
    if (takes_beta(n) && bi < betas.size()) b = betas[bi++];
    auto f = make_activation(n, a, b);
    if (!f) {
      error = "activation '" + n + "' is not supported";
      return {};
    }
    out.push_back(*f);
  }
  return out;
}

std::string check_recurrent(const ir::Node& node, Cell kind) {
  if (direction_count(node) == 0)
    return "direction must be 'forward', 'reverse' or 'bidirectional', got '" +
           node.attr_string("direction", "forward") + "'";
  const int64_t layout = node.attr_int("layout", 0);
  if (layout != 0 && layout != 1) return "layout must be 0 or 1, got " + std::to_string(layout);
  std::string error;
  activations(node, kind, error);
  return error;
}

// Reads element (i, j, k) of a rank-3 tensor stored as [a, b, c] or, when `swap`, [b, a, c].
struct View3 {
  const std::vector<double>* data;
  int64_t a, b, c;
  bool swap;
  double at(int64_t i, int64_t j, int64_t k) const {
    return (*data)[static_cast<size_t>(swap ? (j * a + i) * c + k : (i * b + j) * c + k)];
  }
};

template <typename T>
std::vector<double> to_double_vector(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<double>(to_compute(p[i]));
  return v;
}

template <typename T>
void recurrent_typed(KernelContext& ctx, Cell kind) {
  const std::string label = ctx.node().label();
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor& R = ctx.input(2);
  const int64_t layout = ctx.attr_int("layout", 0);
  const int64_t dirs = direction_count(ctx.node());
  const int64_t G = gate_count(kind);
  REFORGE_CHECK(X.rank() == 3, label, ": X must have rank 3, got ", X.describe());
  const int64_t seq = layout ? X.dim(1) : X.dim(0), batch = layout ? X.dim(0) : X.dim(1), input = X.dim(2);
  const int64_t H = ctx.attr_int("hidden_size", W.rank() == 3 ? W.dim(1) / G : 0);
  REFORGE_CHECK(H > 0, label, ": hidden_size must be positive, got ", H);
  REFORGE_CHECK(W.shape() == (Shape{dirs, G * H, input}), label, ": W must be [", dirs, ", ", G * H, ", ", input,
                "], got ", W.describe());
  REFORGE_CHECK(R.shape() == (Shape{dirs, G * H, H}), label, ": R must be [", dirs, ", ", G * H, ", ", H, "], got ",
                R.describe());
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && i != 4)
      REFORGE_CHECK(ctx.input(i).dtype() == X.dtype(), label, ": input ", i, " ", ctx.input(i).describe(),
                    " must have X's element type");
  const Shape state_shape = layout ? Shape{batch, dirs, H} : Shape{dirs, batch, H};
  std::vector<double> B(static_cast<size_t>(dirs * 2 * G * H), 0.0);
  if (ctx.has_input(3)) {
    REFORGE_CHECK(ctx.input(3).shape() == (Shape{dirs, 2 * G * H}), label, ": B must be [", dirs, ", ", 2 * G * H,
                  "], got ", ctx.input(3).describe());
    B = to_double_vector<T>(ctx.input(3));
  }
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (ctx.has_input(4)) {
    const Tensor& sl = ctx.input(4);
    REFORGE_CHECK(sl.dtype() == DType::Int32 && sl.shape() == (Shape{batch}), label, ": sequence_lens must be int32 [",
                  batch, "], got ", sl.describe());
    for (int64_t b = 0; b < batch; ++b) {
      lens[static_cast<size_t>(b)] = sl.as_int64(b);
      REFORGE_CHECK(lens[static_cast<size_t>(b)] >= 0 && lens[static_cast<size_t>(b)] <= seq, label, ": sequence_lens[",
                    b, "] = ", lens[static_cast<size_t>(b)], " is outside [0, ", seq, "]");
    }
  }
  auto state_input = [&](size_t i, const char* what) {
    std::vector<double> v(static_cast<size_t>(dirs * batch * H), 0.0);
    if (!ctx.has_input(i)) return v;
    REFORGE_CHECK(ctx.input(i).shape() == state_shape, label, ": ", what, " must be ", shape_str(state_shape), ", got ",
                  ctx.input(i).describe());
    return to_double_vector<T>(ctx.input(i));
  };
  const std::vector<double> h0 = state_input(5, "initial_h");
  const std::vector<double> c0 = kind == Cell::Lstm ? state_input(6, "initial_c") : std::vector<double>{};
  std::vector<double> P(static_cast<size_t>(dirs * 3 * H), 0.0);
  if (kind == Cell::Lstm && ctx.has_input(7)) {
    REFORGE_CHECK(ctx.input(7).shape() == (Shape{dirs, 3 * H}), label, ": P must be [", dirs, ", ", 3 * H, "], got ",
                  ctx.input(7).describe());
    P = to_double_vector<T>(ctx.input(7));
  }
  std::string error;
  const std::vector<Activation> acts = activations(ctx.node(), kind, error);
  REFORGE_CHECK(error.empty(), label, ": ", error);
  const bool has_clip = ctx.node().has_attr("clip");
  const double clip = ctx.attr_float("clip", 0.0f);
  const bool lbr = ctx.attr_int("linear_before_reset", 0) != 0;
  const bool input_forget = ctx.attr_int("input_forget", 0) != 0;

  const std::vector<double> xv = to_double_vector<T>(X), wv = to_double_vector<T>(W), rv = to_double_vector<T>(R);
  const View3 x{&xv, seq, batch, input, layout != 0};
  const Shape y_shape = layout ? Shape{batch, seq, dirs, H} : Shape{seq, dirs, batch, H};
  std::vector<double> y(static_cast<size_t>(seq * dirs * batch * H), 0.0);
  auto y_at = [&](int64_t t, int64_t d, int64_t b, int64_t j) -> double& {
    return y[static_cast<size_t>(layout ? ((b * seq + t) * dirs + d) * H + j : ((t * dirs + d) * batch + b) * H + j)];
  };
  auto state_index = [&](int64_t d, int64_t b, int64_t j) {
    return static_cast<size_t>(layout ? (b * dirs + d) * H + j : (d * batch + b) * H + j);
  };
  std::vector<double> h_out(static_cast<size_t>(dirs * batch * H)), c_out(h_out.size());
  auto bound = [&](double v) { return has_clip ? std::min(std::max(v, -clip), clip) : v; };

  std::vector<double> xw(static_cast<size_t>(G * H)), hr(static_cast<size_t>(G * H)), h(static_cast<size_t>(H)),
      c(static_cast<size_t>(H)), nh(static_cast<size_t>(H)), rh(static_cast<size_t>(H));
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = dirs == 2 ? d == 1 : ctx.attr_string("direction", "forward") == "reverse";
    const size_t per = functions_per_direction(kind);
    const Activation& f = acts[static_cast<size_t>(d) * per];
    const Activation& g = per > 1 ? acts[static_cast<size_t>(d) * per + 1] : f;
    const Activation& hf = per > 2 ? acts[static_cast<size_t>(d) * per + 2] : f;
    const double* Wd = wv.data() + d * G * H * input;
    const double* Rd = rv.data() + d * G * H * H;
    const double* Wb = B.data() + d * 2 * G * H;
    const double* Rb = Wb + G * H;
    const double* Pd = P.data() + d * 3 * H;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        h[static_cast<size_t>(j)] = h0[state_index(d, b, j)];
        c[static_cast<size_t>(j)] = kind == Cell::Lstm ? c0[state_index(d, b, j)] : 0.0;
      }
      const int64_t len = lens[static_cast<size_t>(b)];
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = reverse ? len - 1 - s : s;
        for (int64_t gj = 0; gj < G * H; ++gj) {
          double a = Wb[gj], r = Rb[gj];
          for (int64_t k = 0; k < input; ++k) a += x.at(t, b, k) * Wd[gj * input + k];
          for (int64_t k = 0; k < H; ++k) r += h[static_cast<size_t>(k)] * Rd[gj * H + k];
          xw[static_cast<size_t>(gj)] = a;
          hr[static_cast<size_t>(gj)] = r;
        }
        auto gate = [&](int64_t gi, int64_t j) {
          return xw[static_cast<size_t>(gi * H + j)] + hr[static_cast<size_t>(gi * H + j)];
        };
        if (kind == Cell::Rnn) {
          for (int64_t j = 0; j < H; ++j) nh[static_cast<size_t>(j)] = f(bound(gate(0, j)));
        } else if (kind == Cell::Gru) {
          for (int64_t j = 0; j < H; ++j) rh[static_cast<size_t>(j)] = f(bound(gate(1, j))) * h[static_cast<size_t>(j)];
          for (int64_t j = 0; j < H; ++j) {
            const double z = f(bound(gate(0, j)));
            const double r = f(bound(gate(1, j)));
            double pre;
            if (lbr) {
              pre = xw[static_cast<size_t>(2 * H + j)] + r * hr[static_cast<size_t>(2 * H + j)];
            } else {
              double acc = Rb[2 * H + j];
              for (int64_t k = 0; k < H; ++k) acc += rh[static_cast<size_t>(k)] * Rd[(2 * H + j) * H + k];
              pre = xw[static_cast<size_t>(2 * H + j)] + acc;
            }
            const double n = g(bound(pre));
            nh[static_cast<size_t>(j)] = (1.0 - z) * n + z * h[static_cast<size_t>(j)];
          }
        } else {
          for (int64_t j = 0; j < H; ++j) {
            const double cp = c[static_cast<size_t>(j)];
            const double i = f(bound(gate(0, j) + Pd[j] * cp));
            const double fg = input_forget ? 1.0 - i : f(bound(gate(2, j) + Pd[2 * H + j] * cp));
            const double cc = g(bound(gate(3, j)));
            const double cn = fg * cp + i * cc;
            const double o = f(bound(gate(1, j) + Pd[H + j] * cn));
            c[static_cast<size_t>(j)] = cn;
            nh[static_cast<size_t>(j)] = o * hf(cn);
          }
        }
        h = nh;
        for (int64_t j = 0; j < H; ++j) y_at(t, d, b, j) = h[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < H; ++j) {
        h_out[state_index(d, b, j)] = h[static_cast<size_t>(j)];
        c_out[state_index(d, b, j)] = c[static_cast<size_t>(j)];
      }
    }
  }
  auto write = [&](size_t i, const Shape& shape, const std::vector<double>& v) {
    if (!ctx.output_wanted(i)) return;
    Tensor& out = ctx.allocate_output_uninit(i, X.dtype(), shape);
    T* o = out.mutable_data<T>();
    for (size_t k = 0; k < v.size(); ++k) o[k] = from_compute<T>(static_cast<compute_t<T>>(v[k]));
  };
  write(0, y_shape, y);
  write(1, state_shape, h_out);
  if (kind == Cell::Lstm) write(2, state_shape, c_out);
}

template <Cell kKind>
void recurrent_kernel(KernelContext& ctx) {
  dispatch_float(
      ctx.input(0).dtype(), [&](auto tag) { recurrent_typed<typename decltype(tag)::type>(ctx, kKind); },
      ctx.node().label().c_str());
}

}  // namespace

void register_recurrent_ops(OpRegistry& r) {
  // W, R and B are learned weights, and so are LSTM's peepholes P; sequence_lens and the
  // initial states are data.
  const std::vector<InputRole> roles = {InputRole::kData, InputRole::kWeight, InputRole::kWeight, InputRole::kWeight};
  std::vector<InputRole> lstm_roles = roles;
  lstm_roles.insert(lstm_roles.end(), {InputRole::kData, InputRole::kData, InputRole::kData, InputRole::kWeight});
  r.add({"", "RNN", 7, INT_MAX, recurrent_kernel<Cell::Rnn>,
         [](const ir::Node& n) { return check_recurrent(n, Cell::Rnn); }, nullptr, roles});
  r.add({"", "GRU", 7, INT_MAX, recurrent_kernel<Cell::Gru>,
         [](const ir::Node& n) { return check_recurrent(n, Cell::Gru); }, nullptr, roles});
  r.add({"", "LSTM", 7, INT_MAX, recurrent_kernel<Cell::Lstm>,
         [](const ir::Node& n) { return check_recurrent(n, Cell::Lstm); }, nullptr, lstm_roles});
}

}  // namespace reforge::ops::nn
