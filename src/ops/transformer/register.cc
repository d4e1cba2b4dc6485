// The transformer op family: Attention, RotaryEmbedding, RMSNormalization, Resize, SwiGLU,
// TensorScatter, CausalConvWithState, LinearAttention, ONNX Runtime's GroupQueryAttention and RMS
// norms, and the image ops (GridSample, AffineGrid, NonMaxSuppression, RoiAlign). Each lives in
// its own file (attention.cc, rotary.cc, rms_norm.cc, resize.cc, grid_sample.cc, nms.cc,
// cache_ops.cc, linear_attention.cc, roi_align.cc, group_query_attention.cc, simplified_norm.cc)
// and exposes one registration function; this file only collects them.
#include "ops/registry.h"

namespace reforge::ops {

void register_attention(OpRegistry& r);            // attention.cc: Attention 23+
void register_rotary_embedding(OpRegistry& r);     // rotary.cc: RotaryEmbedding 23+
void register_rms_normalization(OpRegistry& r);    // rms_norm.cc: RMSNormalization 23+
void register_resize(OpRegistry& r);               // resize.cc: Resize 10+
void register_grid_sample(OpRegistry& r);          // grid_sample.cc: GridSample 16+, AffineGrid 20+
void register_non_max_suppression(OpRegistry& r);  // nms.cc: NonMaxSuppression 10+
void register_linear_attention(OpRegistry& r);     // linear_attention.cc: LinearAttention 27+
void register_roi_align(OpRegistry& r);            // roi_align.cc: RoiAlign 10+
void register_cache_ops(OpRegistry& r);            // cache_ops.cc: SwiGLU, TensorScatter, CausalConvWithState
void register_group_query_attention(OpRegistry& r);  // group_query_attention.cc: com.microsoft GroupQueryAttention
void register_simplified_norms(OpRegistry& r);       // simplified_norm.cc: SimplifiedLayerNormalization,
                                                     // com.microsoft SkipSimplifiedLayerNormalization

void register_transformer_ops(OpRegistry& r) {
  register_attention(r);
  register_rotary_embedding(r);
  register_rms_normalization(r);
  register_resize(r);
  register_grid_sample(r);
  register_non_max_suppression(r);
  register_cache_ops(r);
  register_roi_align(r);
  register_linear_attention(r);
  register_group_query_attention(r);
  register_simplified_norms(r);
}

}  // namespace reforge::ops
