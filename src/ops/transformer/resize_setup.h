// Resize's host-side setup, shared by every backend's kernel: attribute parsing, the output shape
// and, per resized axis, the taps of every output index (edge-clamped source indices, weights,
// and whether the index lies outside the tf_crop_and_resize region). Applying one axis's taps
// to [outer, in, inner] data gives [outer, out, inner]:
//   extrapolated[y]: extrapolation_value;
//   nearest: the source row whose weight is exactly 1 (none: exclude_outside dropped it, 0);
//   otherwise: acc = 0; acc += w[y * n + k] * src[idx[y * n + k]] for k = 0..n-1, in float64.
// The axes are applied in `steps` order, each to the previous step's float64 result; the last
// result is cast to the input type with saturation (integers round half to even first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops::resize {

enum class Mode { Nearest, Linear, Cubic };
enum class Coord {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfCropAndResize,
  TfHalfPixelForNN
};
enum class NearestMode { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct ResizeAttrs {
  Mode mode = Mode::Nearest;
  Coord coord = Coord::HalfPixel;
  NearestMode nearest = NearestMode::RoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  bool antialias = false;
  DType roi_type = DType::Float64;  // the reference does its roi arithmetic in roi's type
};

// Parses the attributes; returns "" or the reason the node cannot run.
std::string parse_attrs(const ir::Node& node, ResizeAttrs& a);

// The taps of one resized axis: `n` per output index, `out` output indices.
struct AxisTaps {
  int64_t axis = 0, in = 0, out = 0, n = 0;
  std::vector<int64_t> idx;        // [out * n] source indices, clamped to [0, in)
  std::vector<double> w;           // [out * n] weights
  std::vector<char> extrapolated;  // [out]
};

struct ResizePlan {
  ResizeAttrs attrs;
  Shape out_shape;
  std::vector<AxisTaps> steps;  // the axes that change, in application order (none when the output is empty)
};

// Validates the node's inputs (X; roi, scales and sizes on the host) and attributes and resolves
// the output shape and the taps; throws an Error naming the node.
ResizePlan resize_plan(const KernelContext& ctx);

}  // namespace reforge::ops::resize
