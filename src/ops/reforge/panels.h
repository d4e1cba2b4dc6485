// The panel layout of reforge::PackPanels / reforge::MatMulAddPacked weights: a [K, N] matrix
// stored as ceil(N / 16) panels of [K, 16] (the last one zero-padded). It is part of the ops'
// definition (plans store weights in it, recipes make it), so the op set owns its constants; the
// CPU backend's kernels (backends/cpu/sgemm_panels.h) read them from here.
#pragma once

#include <cstdint>

namespace reforge::ops {

inline constexpr int64_t kPanelWidth = 16;

// Floats in the packed form of a [K, N] matrix: K x ceil(N / 16) x 16.
inline int64_t panel_floats(int64_t K, int64_t N) { return K * ((N + kPanelWidth - 1) / kPanelWidth) * kPanelWidth; }

}  // namespace reforge::ops
