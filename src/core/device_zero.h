// Zero fill of device memory. The device backend that owns device memory (backends/cuda) sets it
// once, beside its DeviceMemory functions (core/tensor.h): it clears `bytes` at device address
// `dst` on the device, in order with the calling thread's device work, without waiting for it.
// Whoever hands out device memory that was not just allocated zero-filled (the engine's device
// activation arena, runtime/arena.h) clears it with this, never from the host.
#pragma once

#include <cstddef>

namespace reforge {

using DeviceZeroFn = void (*)(void* dst, size_t bytes);
void set_device_zero(DeviceZeroFn zero);
// The device backend's zero fill, or null when no device backend set one.
DeviceZeroFn device_zero();

}  // namespace reforge
