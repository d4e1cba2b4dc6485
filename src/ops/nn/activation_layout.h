// Activation layouts of the reforge-domain convolution ops (reforge::FusedConv, reforge::MaxPool).
//
// Their layout attributes name "NCHW", "NHWC" or "NCHWc". "NCHWc" is the host backend's native
// layout: blocked channels [N, C/b, H, W, b] (oneDNN's nChw8c / nChw16c), channels-last, or plain,
// whichever that backend's convolutions compute in on the running CPU. Plans store the name,
// never b, and the host backend states what it means when it registers (backends/cpu); shape
// inference reads it from here, so the op set never depends on a backend.
#pragma once

#include <cstdint>

namespace reforge::ops::nn {

enum class ActLayout : uint8_t { Nchw, Nhwc, Blocked };

struct NativeActivationLayout {
  ActLayout layout = ActLayout::Nchw;
  int64_t block = 1;  // b of ActLayout::Blocked; 1 otherwise
};

// Called by the host backend when it registers: `fn` gives the native layout (found once).
void set_native_activation_layout(NativeActivationLayout (*fn)());
// The native layout; throws an Error when no backend has stated it (no backend registered yet).
NativeActivationLayout native_activation_layout();

}  // namespace reforge::ops::nn
