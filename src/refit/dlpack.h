// The reader of tensors a framework holds in memory, described by DLPack (the exchange format of
// numpy, PyTorch, JAX and CuPy): new weights, a state dict to bind, run inputs. A language binding
// copies a DLTensor's fields into a DlpackTensor; everything reforge decides about it (which dtype
// it is, whether its layout can be read in place, which memory it lives in) is decided here.
//
// Invariants: host memory (CPU, CUDA pinned host memory) is wrapped, never copied, and the Tensor
// keeps `owner` alive; device memory (CUDA, CUDA managed) is, as the caller asks (DeviceUse),
// copied into host memory through the device backend (core/tensor.h, device_memory), since a
// refit checks and hashes its sources on the host (and replays there what the device does not),
// or wrapped in place as Memory::Device (the run inputs of a
// plan whose nodes run on the device), or refused (the run inputs of a host plan); any other
// memory, a layout other than compact row-major, or a dtype reforge does not compute with is
// refused naming the tensor. Nothing is read before those checks pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reforge::refit {

// DLPack's device types (DLDeviceType), as its ABI numbers them.
enum class DlDevice : int32_t {
  Cpu = 1,
  Cuda = 2,
  CudaHost = 3,
  OpenCl = 4,
  Vulkan = 7,
  Metal = 8,
  Vpi = 9,
  Rocm = 10,
  RocmHost = 11,
  ExtDev = 12,
  CudaManaged = 13,
  OneApi = 14,
  WebGpu = 15,
  Hexagon = 16,
  Maia = 17,
};

// DLPack's type codes (DLDataTypeCode).
enum class DlCode : uint8_t { Int = 0, UInt = 1, Float = 2, OpaqueHandle = 3, Bfloat = 4, Complex = 5, Bool = 6 };

struct DlType {
  uint8_t code = 0;  // a DlCode
  uint8_t bits = 0;
  uint16_t lanes = 1;
};

// A DLTensor's fields, and what keeps its memory alive.
struct DlpackTensor {
  const void* data = nullptr;
  int32_t device_type = static_cast<int32_t>(DlDevice::Cpu);
  int32_t device_id = 0;
  DlType dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements; empty: compact row-major (DLPack's NULL)
  uint64_t byte_offset = 0;
  std::shared_ptr<const void> owner;
};

// The DType of a DLPack type; Undefined when reforge does not compute with it.
DType dtype_of(DlType t);
// The DLPack type of a DType; throws for one DLPack has no code for.
DlType dlpack_type_of(DType t);
// "float32", "bfloat16", "complex64", "float32x4": a DLPack type for errors.
std::string dlpack_type_name(DlType t);
// "cpu", "cuda:0", "rocm:1", "device type 42": where a DLPack tensor lives, for errors.
std::string dlpack_device_name(int32_t device_type, int32_t device_id);

// What becomes of a tensor in device memory (CUDA, CUDA managed).
enum class DeviceUse {
  CopyToHost,  // copied into host memory (refit values, checkpoint tensors)
  InPlace,     // wrapped as Memory::Device, no copy: run inputs of a device plan, which must live on
               // the device the plan runs on (the language binding checks the device number)
  Refuse,      // refused naming the tensor: run inputs of a plan whose nodes all run on the host
};

// The tensor (see the invariants above), in host memory unless `device` is InPlace. `what` names
// it in errors ("checkpoint tensor 'fc.weight'").
Tensor tensor_from_dlpack(const DlpackTensor& t, const std::string& what, DeviceUse device = DeviceUse::CopyToHost);

}  // namespace reforge::refit
