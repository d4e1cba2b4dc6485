#include "refit/quant_changes.h"

#include <cstring>

#include "ops/reforge/qdq_weight.h"

namespace reforge::refit {

namespace {

// Nibble i (low nibble first) of `bytes`.
inline int nibble(const uint8_t* bytes, int64_t i) { return (i & 1) ? bytes[i / 2] >> 4 : bytes[i / 2] & 0x0f; }

}  // namespace

bool quantized_weight(const plan::WeightEntry& w) {
  if (w.kind != plan::WeightKind::Derived || w.recipe.steps.empty() ||
      w.recipe.result.kind != plan::Operand::Kind::Step)
    return false;
  const plan::RecipeStep& st = w.recipe.steps[w.recipe.result.index];
  return st.domain == "reforge" && (st.op_type == "QuantizeWeight" || st.op_type == "QdqWeight") && st.output <= 2;
}

std::optional<QuantizedChange> quantized_change(const plan::Plan& p, const plan::WeightEntry& w, const Tensor& before,
                                                const Tensor& after) {
  if (!quantized_weight(w)) return std::nullopt;
  const plan::RecipeStep& st = w.recipe.steps[w.recipe.result.index];
  const bool quantize = st.op_type == "QuantizeWeight";  // else QdqWeight (quantized_weight)
  const auto attr = [&](const char* name) {
    auto it = st.attrs.find(name);
    return it == st.attrs.end() ? int64_t{0} : it->second.i;
  };
  // The source at operand `i` of the step (the pass's one-step recipe), or null.
  const auto source = [&](size_t i) -> const plan::Source* {
    if (st.inputs.size() <= i || st.inputs[i].kind != plan::Operand::Kind::Source ||
        st.inputs[i].index >= p.sources.size())
      return nullptr;
    return &p.sources[st.inputs[i].index];
  };
  // bits, K (-1: unknown) and the int4 block size: QuantizeWeight's attributes and its float32
  // source; QdqWeight's form, derived from its codes and scale as its kernel derives it.
  int64_t bits = 0, K = -1, block = 0;
  if (quantize) {
    bits = attr("bits");
    block = attr("block_size");
    if (const plan::Source* s = source(0); s && s->shape.size() == 2) K = s->shape[attr("transposed") ? 1 : 0];
  } else {
    const plan::Source *codes = source(0), *scale = source(1);
    if (!codes || !scale) return std::nullopt;
    ops::quant::QdqForm f;
    const int64_t axis = st.attrs.count("axis") ? attr("axis") : 1;
    if (!ops::quant::qdq_form(codes->dtype, codes->shape, scale->dtype, scale->shape, axis, attr("block_size"),
                              attr("transposed") != 0, f)
             .empty())
      return std::nullopt;
    bits = f.target.bits;
    K = f.target.K;
    block = f.target.block_size;
  }
  static const char* const kPart[] = {"q", "scales", "zero_points"};
  QuantizedChange c;
  c.weight = w.name;
  c.part = kPart[st.output];
  c.compared = before.defined() && before.dtype() == after.dtype() && before.shape() == after.shape();
  const uint8_t* a = static_cast<const uint8_t*>(after.raw());
  const uint8_t* b = c.compared ? static_cast<const uint8_t*>(before.raw()) : nullptr;
  auto count_nibbles = [&](int64_t rows, int64_t row_bytes, int64_t per_row, auto real) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < per_row; ++i) {
        if (!real(i)) continue;
        ++c.values;
        if (!b || nibble(a + r * row_bytes, i) != nibble(b + r * row_bytes, i)) ++c.changed;
      }
  };
  if (st.output == 1 || (st.output == 0 && bits == 8)) {
    // Scales (float32, compared bit for bit) and int8 weights: one value per element.
    const size_t size = dtype_size(after.dtype());
    c.values = static_cast<size_t>(after.numel());
    for (int64_t i = 0; i < after.numel(); ++i)
      if (!b || std::memcmp(a + i * size, b + i * size, size) != 0) ++c.changed;
  } else if (st.output == 0) {
    // int4 [N, n_blocks, blob]: the nibbles of k < K.
    const int64_t N = after.dim(0), n_blocks = after.dim(1), blob = after.dim(2), block = blob * 2;
    count_nibbles(N, n_blocks * blob, n_blocks * block, [&](int64_t i) { return K < 0 || i < K; });
  } else {
    // int4 zero points [N * ceil(n_blocks / 2)]: one nibble per block.
    const int64_t n_blocks = K > 0 && block > 0 ? (K + block - 1) / block : -1;
    const int64_t row_bytes = n_blocks > 0 ? (n_blocks + 1) / 2 : after.numel();
    const int64_t rows = after.numel() / row_bytes;
    count_nibbles(rows, row_bytes, row_bytes * 2, [&](int64_t i) { return n_blocks < 0 || i < n_blocks; });
  }
  return c;
}

}  // namespace reforge::refit
