// Sweep cases of the transformer ops (cuda_sweep/sweep.h): ONNX Attention (3-D and 4-D, grouped
// query heads, masks of every broadcast rank, causal, past and present, softcap, qk output modes,
// nonpad_kv_seqlen from 24, windows from 25), reforge::Attention (layouts, scale ops, mask modes,
// grouped-query repeats), RotaryEmbedding, reforge::Rotary and Resize (every mode, transform,
// opset form and element type).
#include <algorithm>

#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

const std::vector<DType> kAttentionTypes = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};

Tensor mask(Gen& g, DType t, bool is_bool, const Shape& s) {
  return is_bool ? g.random(DType::Bool, s, -0.4f, 1.0f) : g.random(t, s, -3.0f, 0.0f);
}

void onnx_attention_cases(Gen& g) {
  const int version = g.opset();
  {
    for (DType t : kAttentionTypes)
      for (int i = 0; i < (t == DType::Float32 ? 10 : 4); ++i) {
        const int64_t b = g.between(1, 2), hkv = g.between(1, 2), hq = hkv * g.between(1, 3);
        const int64_t sq = g.between(0, 12), skv = g.between(1, 40), d = g.pick(std::vector<int64_t>{8, 16, 24, 64, 80});
        const int64_t dv = g.coin() ? d : g.pick(std::vector<int64_t>{8, 40});
        const bool three_d = g.between(0, 2) == 0;
        const int64_t past = version == 23 && g.coin() ? g.between(1, 9) : 0;
        const int64_t total = past + skv;
        Attrs a;
        if (g.coin()) a.push_back(ir::int_attr("is_causal", 1));
        if (g.between(0, 2) == 0) a.push_back(ir::float_attr("scale", 0.37f));
        if (g.between(0, 3) == 0) a.push_back(ir::float_attr("softcap", 2.5f));
        if (g.between(0, 3) == 0) a.push_back(ir::int_attr("softmax_precision", g.pick(std::vector<int64_t>{1, 10, 11, 16})));
        std::vector<Tensor> ins;
        if (three_d) {
          a.push_back(ir::int_attr("q_num_heads", hq));
          a.push_back(ir::int_attr("kv_num_heads", hkv));
          ins = {g.random(t, {b, sq, hq * d}), g.random(t, {b, skv, hkv * d}), g.random(t, {b, skv, hkv * dv})};
        } else {
          ins = {g.random(t, {b, hq, sq, d}), g.random(t, {b, hkv, skv, d}), g.random(t, {b, hkv, skv, dv})};
        }
        const int64_t mask_form = g.between(0, 6);
        const Shape ms = std::vector<Shape>{{total}, {sq, total}, {b, 1, sq, total}, {1, hq, 1, total}, {b, hq, sq, total},
                                            {}, {}}[static_cast<size_t>(mask_form)];
        ins.push_back(mask_form < 5 ? mask(g, t, g.coin(), ms) : Tensor());
        size_t outputs = 1;
        if (past) {
          ins.push_back(g.random(t, {b, hkv, past, d}));
          ins.push_back(g.random(t, {b, hkv, past, dv}));
          outputs = 3;
        } else if (!three_d && g.coin()) {
          outputs = 3;
        }
        if (version == 24 && !past && !three_d) {
          ins.resize(6);
          ins.push_back(g.indices(g.coin() ? DType::Int64 : DType::Int32, {b}, skv + 1, false));
        }
        if (version == 25) {
          a.push_back(ir::int_attr("left_window_size", g.between(-1, 6)));
          a.push_back(ir::int_attr("right_window_size", g.between(-1, 3)));
        }
        if (version == 23 && g.between(0, 3) == 0) {
          a.push_back(ir::int_attr("qk_matmul_output_mode", g.between(0, 3)));
          outputs = 4;
        }
        Case& c = g.add(ins, a, outputs);
        if (outputs == 4 && !past) Gen::drop_output(c, 1), Gen::drop_output(c, 2);
      }
  }
}

// [B, H, S, D] in `layout` (bhds: [B, H, D, S]).
Shape in_layout(const std::string& layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  if (layout == "bshd") return {b, s, h, d};
  if (layout == "bhds") return {b, h, d, s};
  return {b, h, s, d};
}

// reforge::Attention(Q, K, V, scale?, mask?, fill?, k_expand?, k_reshape?, v_expand?, v_reshape?, k_scale?).
void fused_attention_cases(Gen& g) {
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16})
    for (int i = 0; i < (t == DType::Float32 ? 16 : 6); ++i) {
      const int64_t b = g.between(1, 2), hkv = g.between(1, 2), ratio = g.between(1, 3), hq = hkv * ratio;
      const int64_t sq = g.between(1, 12), sk = g.between(1, 40), d = g.pick(std::vector<int64_t>{8, 16, 32, 64, 80});
      const std::string ql = g.pick(std::vector<std::string>{"bhsd", "bshd"});
      const std::string kl = g.pick(std::vector<std::string>{"bhsd", "bshd", "bhds"});
      const std::string vl = g.pick(std::vector<std::string>{"bhsd", "bshd"});
      const std::string ol = g.pick(std::vector<std::string>{"bhsd", "bshd"});
      const std::string scale_op = g.pick(std::vector<std::string>{"none", "mul", "div", "mul_qk"});
      const std::string mask_mode = g.pick(std::vector<std::string>{"none", "add", "where_fill_true", "where_fill_false"});
      const bool repeat = ratio > 1 && kl == "bhsd" && vl == "bhsd";
      const int64_t kh = repeat ? hkv : hq;
      Attrs a = {ir::string_attr("q_layout", ql), ir::string_attr("k_layout", kl), ir::string_attr("v_layout", vl),
                 ir::string_attr("out_layout", ol), ir::string_attr("scale_op", scale_op),
                 ir::string_attr("mask_mode", mask_mode)};
      if (g.coin()) a.push_back(ir::string_attr("softmax_nan", "zero"));
      std::vector<Tensor> ins = {g.random(t, in_layout(ql, b, hq, sq, d)), g.random(t, in_layout(kl, b, kh, sk, d)),
                                 g.random(t, in_layout(vl, b, kh, sk, d))};
      ins.push_back(scale_op == "none" ? Tensor() : Gen::scalar(t, scale_op == "div" ? 8.0 : 0.35));
      const Shape ms = g.pick(std::vector<Shape>{{sq, sk}, {b, 1, sq, sk}, {1, 1, sq, sk}});
      ins.push_back(mask_mode == "none" ? Tensor() : mask(g, t, mask_mode != "add", ms));
      ins.push_back(mask_mode.rfind("where", 0) == 0 ? Gen::scalar(t, -1e4) : Tensor());
      if (repeat) {
        const Tensor expand = Gen::ints({b, hkv, ratio, sk, d}), reshape = Gen::ints({b, hq, sk, d});
        ins.insert(ins.end(), {expand, reshape, expand, reshape});
      }
      if (scale_op == "mul_qk") ins.resize(10), ins.push_back(Gen::scalar(t, 0.35));
      g.add(ins, a);
    }
}

// RotaryEmbedding: 4-D with per-token caches [B, S, half], or 3-D with num_heads and position_ids
// into a [max_position, half] cache; interleaved or half-split; a partial rotary_embedding_dim.
void rotary_embedding_cases(Gen& g) {
  for (DType t : kAttentionTypes)
    for (int i = 0; i < (t == DType::Float32 ? 8 : 3); ++i) {
      const int64_t b = g.between(1, 2), h = g.between(1, 3), s = g.between(1, 9), dh = 2 * g.between(1, 8);
      const int64_t rot = g.coin() ? 0 : 2 * g.between(1, dh / 2);
      const int64_t half = (rot ? rot : dh) / 2;
      Attrs a = {ir::int_attr("interleaved", g.between(0, 1)), ir::int_attr("rotary_embedding_dim", rot)};
      if (g.coin()) {
        g.add({g.random(t, {b, h, s, dh}), g.random(t, {b, s, half}, -1, 1), g.random(t, {b, s, half}, -1, 1)}, a);
      } else {
        const int64_t max_pos = g.between(1, 30);
        a.push_back(ir::int_attr("num_heads", h));
        g.add({g.random(t, {b, s, h * dh}), g.random(t, {max_pos, half}, -1, 1), g.random(t, {max_pos, half}, -1, 1),
               g.indices(DType::Int64, {b, s}, max_pos, false)},
              a);
      }
    }
}

// reforge::Rotary(X, cos, sin, hi_start, hi_end, lo_start, lo_end): rotate-half bounds, tables
// broadcasting over batch and heads (last dimension D or 1), 1-D to 4-D X.
void fused_rotary_cases(Gen& g) {
  for (DType t : kAttentionTypes)
    for (int i = 0; i < (t == DType::Float32 ? 10 : 3); ++i) {
      const int64_t b = g.between(1, 2), h = g.between(1, 3), s = g.between(1, 9), d = 2 * g.between(1, 8);
      const std::string layout = g.pick(std::vector<std::string>{"bhsd", "bshd"});
      const int rank = layout == "bshd" ? 4 : static_cast<int>(g.between(1, 4));
      Shape x = in_layout(layout, b, h, s, d);
      x.erase(x.begin(), x.begin() + (4 - rank));
      Shape table = g.pick(std::vector<Shape>{{s, d}, {b, 1, s, d}, {1, h, s, d}, {s, 1}});
      if (rank < 2) table = {d};
      const Tensor hs = Gen::ints({g.coin() ? d / 2 : -d / 2}), he = Gen::ints({g.coin() ? d : int64_t{1} << 62});
      g.add({g.random(t, x), g.random(t, table, -1, 1), g.random(t, table, -1, 1), hs, he, Gen::ints({0}),
             Gen::ints({d / 2})},
            {ir::string_attr("layout", layout)});
    }
}

// Resize: opset 10 (scales), 11 (roi, scales or sizes), 13 (optional inputs), 18 (antialias, axes,
// keep_aspect_ratio_policy), 19 (half_pixel_symmetric); every mode and transform.
void resize_cases(Gen& g) {
  const int version = g.opset();
  {
    std::vector<std::string> transforms = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                           "tf_crop_and_resize"};
    if (version >= 19) transforms.push_back("half_pixel_symmetric");
    for (DType t : numeric_types())
      for (int i = 0; i < (t == DType::Float32 ? 12 : 2); ++i) {
        const std::string mode = g.pick(std::vector<std::string>{"nearest", "linear", "cubic"});
        if (version == 10 && mode == "cubic") continue;
        const int rank = static_cast<int>(g.between(1, 4));
        const Shape s = g.shape(rank, 1, 7);
        std::vector<float> scales;
        std::vector<int64_t> sizes;
        for (int d = 0; d < rank; ++d) {
          // Cubic and linear resize the last two dimensions; nearest any.
          const bool resized = mode == "nearest" || d >= rank - 2;
          scales.push_back(resized ? static_cast<float>(g.between(2, 12)) / 4 : 1.0f);
          sizes.push_back(resized ? g.between(1, 12) : s[static_cast<size_t>(d)]);
        }
        Attrs a = {ir::string_attr("mode", mode)};
        const Tensor x = g.random(t, s, -3.0f, 3.0f);
        if (version == 10) {
          g.add({x, Tensor::copy_of(DType::Float32, {rank}, scales.data())}, a);
          continue;
        }
        const std::string ctm = g.pick(transforms);
        a.push_back(ir::string_attr("coordinate_transformation_mode", ctm));
        if (mode == "nearest")
          a.push_back(ir::string_attr("nearest_mode", g.pick(std::vector<std::string>{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})));
        if (mode == "cubic") {
          a.push_back(ir::float_attr("cubic_coeff_a", g.coin() ? -0.75f : -0.5f));
          a.push_back(ir::int_attr("exclude_outside", g.between(0, 1)));
        }
        Tensor roi;
        if (ctm == "tf_crop_and_resize") {
          std::vector<float> r;
          for (int d = 0; d < rank; ++d) r.push_back(static_cast<float>(g.between(-2, 4)) / 10);
          for (int d = 0; d < rank; ++d) r.push_back(static_cast<float>(g.between(6, 12)) / 10);
          roi = Tensor::copy_of(DType::Float32, {2 * static_cast<int64_t>(rank)}, r.data());
          a.push_back(ir::float_attr("extrapolation_value", 1.5f));
        } else if (version < 13) {
          roi = Tensor::empty(DType::Float32, {0});
        }
        if (version >= 18 && mode != "nearest" && g.between(0, 2) == 0) a.push_back(ir::int_attr("antialias", 1));
        const bool by_sizes = g.coin();
        Tensor sc = Tensor::copy_of(DType::Float32, {rank}, scales.data());
        if (by_sizes) {
          if (version >= 18 && g.coin() && mode == "nearest")
            a.push_back(ir::string_attr("keep_aspect_ratio_policy", g.pick(std::vector<std::string>{"not_larger", "not_smaller"})));
          g.add({x, roi, version < 13 ? Tensor::empty(DType::Float32, {0}) : Tensor(), Gen::ints(sizes)}, a);
        } else {
          g.add({x, roi, sc}, a);
        }
      }
  }
}

}  // namespace

void add_transformer_cases(std::vector<OpCases>& out) {
  out.push_back({"transformer", "", "Attention", onnx_attention_cases, {24, 25}});
  out.push_back({"transformer", "reforge", "Attention", fused_attention_cases});
  out.push_back({"transformer", "", "RotaryEmbedding", rotary_embedding_cases});
  out.push_back({"transformer", "reforge", "Rotary", fused_rotary_cases});
  out.push_back({"transformer", "", "Resize", resize_cases, {11, 13, 18, 19}});
}

}  // namespace reforge::cuda_sweep
