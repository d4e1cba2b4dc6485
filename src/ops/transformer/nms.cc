// NonMaxSuppression: per batch and class, greedily keeps the highest-scoring boxes, dropping each
// box whose intersection over union with a kept one exceeds iou_threshold.
//
// boxes [batches, boxes, 4] are corners [y1, x1, y2, x2] (either diagonal; center_point_box 0) or
// [x_center, y_center, width, height] (center_point_box 1); scores [batches, classes, boxes].
// Optional scalar inputs: max_output_boxes_per_class (int64, default 0: nothing is selected;
// negative counts as 0), iou_threshold (default 0) and score_threshold (when given, only scores
// strictly above it are candidates). Candidates are taken by descending score, equal scores by
// ascending box index; a box of zero area or with no overlap never suppresses. Output: int64
// [selected, 3] rows (batch, class, box) in batch, class, selection order. Geometry is computed
// in the boxes' compute type, as the ONNX reference does.
#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

std::string check_nms(const ir::Node& node) {
  const int64_t c = node.attr_int("center_point_box", 0);
  if (c != 0 && c != 1) return "center_point_box must be 0 or 1, got " + std::to_string(c);
  return "";
}

template <typename C>
struct Box {
  C x_min, x_max, y_min, y_max;
};

template <typename C>
Box<C> box_at(const C* b, bool center) {
  if (center) {
    const C hw = b[2] / C(2), hh = b[3] / C(2);
    return {b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh};
  }
  return {std::min(b[1], b[3]), std::max(b[1], b[3]), std::min(b[0], b[2]), std::max(b[0], b[2])};
}

template <typename C>
bool suppresses(const Box<C>& a, const Box<C>& b, C iou_threshold) {
  const C ix_min = std::max(a.x_min, b.x_min), ix_max = std::min(a.x_max, b.x_max);
  if (ix_max <= ix_min) return false;
  const C iy_min = std::max(a.y_min, b.y_min), iy_max = std::min(a.y_max, b.y_max);
  if (iy_max <= iy_min) return false;
  const C inter = (ix_max - ix_min) * (iy_max - iy_min);
  if (inter <= 0) return false;
  const C area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
  const C area_b = (b.x_max - b.x_min) * (b.y_max - b.y_min);
  const C uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > iou_threshold;
}

void nms_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  REFORGE_CHECK(boxes.rank() == 3 && boxes.dim(2) == 4, label, ": boxes must be [batches, boxes, 4], got ",
                boxes.describe());
  REFORGE_CHECK(scores.rank() == 3 && scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1), label,
                ": scores must be [", boxes.dim(0), ", classes, ", boxes.dim(1), "], got ", scores.describe());
  REFORGE_CHECK(scores.dtype() == boxes.dtype(), label, ": scores ", scores.describe(),
                " must have the boxes' element type");
  const bool center = ctx.attr_int("center_point_box", 0) == 1;
  auto scalar = [&](size_t i, const char* what) -> const Tensor* {
    if (!ctx.has_input(i) || ctx.input(i).numel() == 0) return nullptr;
    REFORGE_CHECK(ctx.input(i).numel() == 1, label, ": ", what, " must hold one value, got ", ctx.input(i).describe());
    return &ctx.input(i);
  };
  const Tensor* max_t = scalar(2, "max_output_boxes_per_class");
  const Tensor* iou_t = scalar(3, "iou_threshold");
  const Tensor* score_t = scalar(4, "score_threshold");
  const int64_t max_per_class = max_t ? std::max<int64_t>(max_t->as_int64(0), 0) : 0;
  const int64_t batches = boxes.dim(0), n = boxes.dim(1), classes = scores.dim(1);
  std::vector<int64_t> rows;
  dispatch_float(
      boxes.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = compute_t<T>;
        const C iou = iou_t ? static_cast<C>(iou_t->as_double(0)) : C(0);
        const C score_min = score_t ? static_cast<C>(score_t->as_double(0)) : C(0);
        std::vector<C> coords(4);
        std::vector<Box<C>> bx(static_cast<size_t>(n));
        std::vector<int64_t> cand, kept;
        for (int64_t b = 0; b < batches; ++b) {
          for (int64_t i = 0; i < n; ++i) {
            for (int k = 0; k < 4; ++k)
              coords[static_cast<size_t>(k)] = to_compute(boxes.data<T>()[(b * n + i) * 4 + k]);
            bx[static_cast<size_t>(i)] = box_at<C>(coords.data(), center);
          }
          for (int64_t c = 0; c < classes; ++c) {
            const T* s = scores.data<T>() + (b * classes + c) * n;
            cand.clear();
            for (int64_t i = 0; i < n; ++i)
              if (!score_t || to_compute(s[i]) > score_min) cand.push_back(i);
            std::stable_sort(cand.begin(), cand.end(),
                             [&](int64_t x, int64_t y) { return to_compute(s[x]) > to_compute(s[y]); });
            kept.clear();
            for (int64_t i : cand) {
              if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
              bool keep = true;
              for (int64_t k : kept)
                if (suppresses(bx[static_cast<size_t>(i)], bx[static_cast<size_t>(k)], iou)) {
                  keep = false;
                  break;
                }
              if (!keep) continue;
              kept.push_back(i);
              rows.insert(rows.end(), {b, c, i});
            }
          }
        }
      },
      label.c_str());
  Tensor& out = ctx.allocate_output_uninit(0, DType::Int64, Shape{static_cast<int64_t>(rows.size() / 3), 3});
  std::copy(rows.begin(), rows.end(), out.mutable_data<int64_t>());
}

}  // namespace

void register_non_max_suppression(OpRegistry& r) {
  r.add({"",
         "NonMaxSuppression",
         10,
         INT_MAX,
         nms_kernel,
         check_nms,
         nullptr,
         {InputRole::kData, InputRole::kData, InputRole::kShape, InputRole::kShape, InputRole::kShape}});
}

}  // namespace reforge::ops
