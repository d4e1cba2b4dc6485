// What "NCHWc" means, as the host backend states it (ops/nn/activation_layout.h).
#include "ops/nn/activation_layout.h"

#include <atomic>

#include "core/error.h"

namespace reforge::ops::nn {

namespace {
std::atomic<NativeActivationLayout (*)()> g_native{nullptr};
}  // namespace

void set_native_activation_layout(NativeActivationLayout (*fn)()) { g_native.store(fn); }

NativeActivationLayout native_activation_layout() {
  auto fn = g_native.load();
  if (!fn) fail("layout 'NCHWc' is the host backend's native layout, and no host backend is registered");
  return fn();
}

}  // namespace reforge::ops::nn
