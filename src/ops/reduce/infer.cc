// Shape and type inference of the reduce family (ops/infer.h): Reduce*, ArgMax/ArgMin,
// Softmax/LogSoftmax/Hardmax, TopK, CumSum/CumProd, Einsum, Det, DFT/STFT and the losses.
//
// Reduce axes are an attribute before opset 13 (ReduceSum) or 18 (the others) and an optional
// input from then on; an axes input whose contents inference does not know still gives the
// rank when keepdims is set (each dimension is then unknown: kept or 1). TopK's k is an
// attribute before opset 10, then an input: a constant or a followed shape value names the
// output size, anything else gets a fresh symbol. Einsum parses its equation the way the
// kernel does ("..." right-aligned broadcast labels; an implicit output is the ellipsis followed
// by the letters used exactly once, in ASCII order).
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ops/reduce/einsum.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

// Reduce* with the opset from which axes are an input.
InferFn reduce(int axes_input_since) {
  return [axes_input_since](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
    const bool noop = ctx.attr_int("noop_with_empty_axes", 0) != 0;
    std::vector<int64_t> axes;
    if (ctx.opset() >= axes_input_since) {
      if (ctx.has_input(1)) {
        const ValueType& at = ctx.input_type(1);
        if (at.dtype != DType::Undefined && at.dtype != DType::Int64 && at.dtype != DType::Int32)
          ctx.fail("axes must be int64, got " + at.str());
        if (at.rank_known && at.shape.size() > 1) ctx.fail("axes must be a 1-D tensor, got " + at.str());
        const SymShape* v = ctx.input_dims_value(1);
        bool known = v != nullptr;
        if (v)
          for (const auto& d : *v) known = known && d.known();
        if (!known) {
          // Which axes is data: with keepdims the rank stays, every dimension kept or 1.
          if (!keepdims || !x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
          SymShape out;
          for (size_t i = 0; i < x.shape.size(); ++i)
            out.push_back(x.shape[i].known() && x.shape[i].value() == 1 ? SymDim(1) : ctx.fresh_dim());
          return ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
        }
        for (const auto& d : *v) axes.push_back(d.value());
      }
    } else {
      axes = ctx.attr_ints("axes");
    }
    if (axes.empty() && noop) return ctx.set_output(0, x);
    if (x.dtype == DType::Bool && ctx.node().op_type != "ReduceMax" && ctx.node().op_type != "ReduceMin")
      ctx.fail("input of type bool is only supported by ReduceMax and ReduceMin");
    if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    std::vector<char> flags(static_cast<size_t>(rank), axes.empty() ? 1 : 0);
    for (int64_t a : axes) {
      if (rank == 0) {
        if (a != 0 && a != -1) ctx.fail("axis " + std::to_string(a) + " is out of range for input of rank 0");
        continue;  // numpy-style: axis 0/-1 of a scalar reduces nothing
      }
      const int64_t n = normalize_axis(ctx, a, rank);
      if (flags[static_cast<size_t>(n)]) ctx.fail("axis " + std::to_string(a) + " is listed more than once");
      flags[static_cast<size_t>(n)] = 1;
    }
    SymShape out;
    for (int64_t i = 0; i < rank; ++i) {
      if (!flags[static_cast<size_t>(i)])
        out.push_back(x.shape[static_cast<size_t>(i)]);
      else if (keepdims)
        out.push_back(1);
    }
    ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
  };
}

void arg_reduce(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(DType::Int64));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  // A scalar acts as a one-element vector (axis 0 or -1) and gives a scalar.
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 0), std::max<int64_t>(rank, 1));
  const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  SymShape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != axis)
      out.push_back(x.shape[static_cast<size_t>(i)]);
    else if (keepdims)
      out.push_back(1);
  }
  ctx.set_output(0, ValueType::of(DType::Int64, std::move(out)));
}

void softmax(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known) {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const bool coerce_2d = ctx.opset() < 13;
    const int64_t axis = ctx.attr_int("axis", coerce_2d ? 1 : -1);
    // Before opset 13, axis == rank is allowed (an empty trailing block).
    if (!(coerce_2d && axis == rank)) normalize_axis(ctx, axis, std::max<int64_t>(rank, 1));
  }
  ctx.set_output(0, x);
}

void topk(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  SymDim k;
  if (ctx.opset() >= 10) {
    const ValueType& kt = ctx.input_type(1);
    if (kt.dtype != DType::Undefined && !is_integer(kt.dtype)) ctx.fail("K must be an integer tensor, got " + kt.str());
    const SymShape* v = ctx.input_dims_value(1);
    if (v && v->size() == 1)
      k = (*v)[0];
    else
      k = ctx.fresh_dim();
  } else {
    if (!ctx.node().has_attr("k")) ctx.fail("attribute k is required before opset 10");
    k = ctx.attr_int("k", 0);
  }
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::unranked(x.dtype));
    if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::unranked(DType::Int64));
    return;
  }
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank < 1) ctx.fail("input must have rank >= 1, got " + x.str());
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -1), rank));
  const SymDim& n = x.shape[axis];
  if (k.known() && (k.value() < 0 || (n.known() && k.value() > n.value())))
    ctx.fail("k = " + k.str() + " is out of range for axis " + std::to_string(axis) + " of size " + n.str());
  SymShape out = x.shape;
  out[axis] = k;
  ctx.set_output(0, ValueType::of(x.dtype, out));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::of(DType::Int64, std::move(out)));
}

void cumsum(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& a = ctx.input_type(1);
  if (a.dtype != DType::Undefined && a.dtype != DType::Int32 && a.dtype != DType::Int64)
    ctx.fail("axis must be a scalar int32/int64 tensor, got " + a.str());
  if (x.rank_known)
    if (const SymShape* v = ctx.input_dims_value(1); v && v->size() == 1 && (*v)[0].known())
      normalize_axis(ctx, (*v)[0].value(), std::max<int64_t>(static_cast<int64_t>(x.shape.size()), 1));
  ctx.set_output(0, x);
}

// NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss: scores [N, C, d...], target [N, d...];
// the loss has the target's shape with reduction 'none', else it is a scalar.
void loss(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& t = ctx.input_type(1);
  if (t.dtype != DType::Undefined && t.dtype != DType::Int32 && t.dtype != DType::Int64)
    ctx.fail("target must be int32 or int64, got " + t.str());
  if (x.rank_known && x.shape.size() < 2) ctx.fail("scores must have rank >= 2 ([N, C, ...]), got " + x.str());
  if (x.rank_known && t.rank_known && t.shape.size() + 1 != x.shape.size())
    ctx.fail("target " + t.str() + " must have rank one less than scores " + x.str());
  if (ctx.has_input(2) && ctx.input_type(2).dtype != x.dtype && ctx.input_type(2).dtype != DType::Undefined)
    ctx.fail("weight " + ctx.input_type(2).str() + " must have the scores' element type");
  const std::string red = ctx.attr_string("reduction", "mean");
  if (red != "none" && red != "sum" && red != "mean")
    ctx.fail("reduction must be 'none', 'sum' or 'mean', got '" + red + "'");
  if (red != "none") {
    ctx.set_output(0, ValueType::of(x.dtype, {}));
  } else if (x.rank_known) {
    SymShape out{x.shape[0]};
    for (size_t i = 2; i < x.shape.size(); ++i)
      out.push_back(t.rank_known ? merge_dims(ctx, x.shape[i], t.shape[i - 1], "target dimension") : x.shape[i]);
    if (t.rank_known) out[0] = merge_dims(ctx, x.shape[0], t.shape[0], "batch dimension");
    ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
  } else {
    ctx.set_output(0, ValueType{x.dtype, t.rank_known, t.shape});
  }
  if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty()) ctx.set_output(1, x);
}

// DFT: the signal axis becomes n (n / 2 + 1 one-sided forward), the last axis 2 (1 for a
// one-sided inverse); n follows dft_length when its value is known.
void dft(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank < 2) ctx.fail("input must be [..., signal, 1 or 2], got " + x.str());
  int64_t axis = ctx.opset() < 20 ? ctx.attr_int("axis", 1) : -2;
  if (ctx.opset() >= 20 && ctx.has_input(2)) {
    const auto a = known_ints(ctx, 2);
    if (!a || a->size() != 1) {
      SymShape out;
      for (int64_t i = 0; i + 1 < rank; ++i) out.push_back(ctx.fresh_dim());
      out.push_back(ctx.fresh_dim());
      return ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
    }
    axis = (*a)[0];
  }
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank - 1) ctx.fail("axis " + std::to_string(axis) + " is out of range for " + x.str());
  const bool inverse = ctx.attr_int("inverse", 0) != 0, onesided = ctx.attr_int("onesided", 0) != 0;
  const SymDim m = x.shape[static_cast<size_t>(axis)];
  SymDim n = inverse && onesided ? sym_mul(sym_sub(m, 1), 2) : m;
  if (ctx.has_input(1)) {
    const auto l = known_ints(ctx, 1);
    n = l && l->size() == 1 ? SymDim((*l)[0]) : ctx.fresh_dim();
  }
  SymShape out = x.shape;
  out[static_cast<size_t>(axis)] = inverse || !onesided ? n : sym_add(sym_div(n, 2), 1);
  out[static_cast<size_t>(rank - 1)] = inverse && onesided ? 1 : 2;
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// STFT: [batch, frames, bins, 2], sizes from the constant frame_step, frame_length and window.
void stft(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() != 3) ctx.fail("signal must be [batch, length, 1 or 2], got " + x.str());
  const SymDim batch = x.rank_known ? x.shape[0] : ctx.fresh_dim();
  std::optional<int64_t> flen;
  if (ctx.has_input(3))
    if (const auto l = known_ints(ctx, 3); l && l->size() == 1) flen = (*l)[0];
  if (ctx.has_input(2))
    if (const ValueType& w = ctx.input_type(2); w.rank_known && w.shape.size() == 1 && w.shape[0].known())
      flen = w.shape[0].value();
  const auto step = known_ints(ctx, 1);
  SymDim frames = ctx.fresh_dim(), bins = ctx.fresh_dim();
  if (flen) {
    bins = ctx.attr_int("onesided", 1) != 0 ? *flen / 2 + 1 : *flen;
    if (step && step->size() == 1 && (*step)[0] > 0 && x.rank_known)
      frames = sym_add(sym_div(sym_sub(x.shape[1], *flen), (*step)[0]), 1);
  }
  ctx.set_output(0, ValueType::of(x.dtype, {batch, frames, bins, 2}));
}

// ---- Einsum ----

using einsum::Equation;
using einsum::kEllipsis;

void infer_einsum(InferContext& ctx) {
  if (!ctx.node().has_attr("equation")) ctx.fail("attribute 'equation' is required");
  const std::string raw = ctx.attr_string("equation", "");
  const Equation eq = einsum::parse_equation(raw, ctx.node().label());
  if (eq.inputs.size() != ctx.num_inputs())
    ctx.fail("einsum equation '" + raw + "' has " + std::to_string(eq.inputs.size()) + " operands but the node has " +
             std::to_string(ctx.num_inputs()) + " inputs");
  const DType dt = ctx.input_type(0).dtype;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const ValueType& t = ctx.input_type(i);
    if (t.dtype != DType::Undefined && dt != DType::Undefined && t.dtype != dt)
      ctx.fail("einsum inputs must share one type, input " + std::to_string(i) + " is " + t.str());
    if (!t.rank_known) return ctx.set_output(0, ValueType::unranked(dt));
  }
  // The ellipsis covers the broadcast of what each operand leaves to it (right-aligned).
  SymShape ell;
  std::map<int, SymDim> size;  // per letter
  std::map<int, int> uses;
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const auto& term = eq.inputs[i];
    const SymShape& s = ctx.input_type(i).shape;
    const bool has_ell = std::find(term.begin(), term.end(), kEllipsis) != term.end();
    const size_t letters = term.size() - (has_ell ? 1 : 0);
    if (has_ell ? s.size() < letters : s.size() != letters)
      ctx.fail("einsum term " + std::to_string(i) + " of '" + raw + "' names " + std::to_string(letters) +
               " dimensions but input " + std::to_string(i) + " is " + ctx.input_type(i).str());
    const size_t n_ell = s.size() - letters;
    std::map<int, SymDim> seen;
    size_t d = 0;
    for (int l : term) {
      if (l == kEllipsis) {
        ell = broadcast_shapes(
            ctx, ell, SymShape(s.begin() + static_cast<int64_t>(d), s.begin() + static_cast<int64_t>(d + n_ell)));
        d += n_ell;
        continue;
      }
      const SymDim& dim = s[d++];
      ++uses[l];
      if (auto it = seen.find(l); it != seen.end() && !(it->second == dim)) {
        if (it->second.known() && dim.known())
          ctx.fail(std::string("einsum label '") + char(l) + "' repeated in input " + std::to_string(i) +
                   " with different sizes (" + it->second.str() + " and " + dim.str() + ")");
      }
      seen[l] = dim;
      // A size-1 dimension against a larger one broadcasts.
      auto it = size.find(l);
      if (it == size.end())
        size[l] = dim;
      else
        it->second = broadcast_shapes(ctx, {it->second}, {dim})[0];
    }
  }
  SymShape out;
  if (eq.explicit_output) {
    for (int l : eq.output) {
      if (l == kEllipsis) {
        out.insert(out.end(), ell.begin(), ell.end());
        continue;
      }
      auto it = size.find(l);
      if (it == size.end())
        ctx.fail(std::string("output ") + char(l) + " of einsum equation '" + raw + "' does not appear in any input");
      out.push_back(it->second);
    }
  } else {
    out = ell;
    for (const auto& [l, n] : uses)  // std::map: ASCII order
      if (n == 1) out.push_back(size[l]);
  }
  ctx.set_output(0, ValueType::of(dt, std::move(out)));
}

}  // namespace

void register_reduce_inference(OpRegistry& r) {
  r.set_infer("", "ReduceSum", 1, reduce(13));
  for (const char* op : {"ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                         "ReduceProd", "ReduceMax", "ReduceMin"})
    r.set_infer("", op, 1, reduce(18));
  r.set_infer("", "ArgMax", 1, arg_reduce);
  r.set_infer("", "ArgMin", 1, arg_reduce);
  r.set_infer("", "Softmax", 1, softmax);
  r.set_infer("", "LogSoftmax", 1, softmax);
  r.set_infer("", "TopK", 1, topk);
  r.set_infer("", "CumSum", 11, cumsum);
  r.set_infer("", "CumProd", 26, cumsum);
  r.set_infer("", "Hardmax", 1, softmax);
  r.set_infer("", "NegativeLogLikelihoodLoss", 12, loss);
  r.set_infer("", "SoftmaxCrossEntropyLoss", 12, loss);
  r.set_infer("", "DFT", 17, dft);
  r.set_infer("", "STFT", 17, stft);
  r.set_infer("", "Det", 11, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
    if (x.shape.size() < 2) ctx.fail("input must be [..., M, M], got " + x.str());
    merge_dims(ctx, x.shape[x.shape.size() - 1], x.shape[x.shape.size() - 2], "matrix dimensions");
    ctx.set_output(0, ValueType::of(x.dtype, SymShape(x.shape.begin(), x.shape.end() - 2)));
  });
  r.set_infer("", "Einsum", 12, infer_einsum);
}

}  // namespace reforge::ops
