#include "refit/dlpack.h"

#include "core/error.h"

namespace reforge::refit {

namespace {

// The (code, bits) pairs reforge computes with, one lane each.
struct Pair {
  DlCode code;
  uint8_t bits;
  DType dtype;
};
constexpr Pair kPairs[] = {
    {DlCode::Float, 32, DType::Float32},   {DlCode::Float, 64, DType::Float64}, {DlCode::Float, 16, DType::Float16},
    {DlCode::Bfloat, 16, DType::BFloat16}, {DlCode::Int, 8, DType::Int8},       {DlCode::Int, 16, DType::Int16},
    {DlCode::Int, 32, DType::Int32},       {DlCode::Int, 64, DType::Int64},     {DlCode::UInt, 8, DType::UInt8},
    {DlCode::UInt, 16, DType::UInt16},     {DlCode::UInt, 32, DType::UInt32},   {DlCode::UInt, 64, DType::UInt64},
    {DlCode::Bool, 8, DType::Bool},
};

bool compact_row_major(const DlpackTensor& t) {
  if (t.strides.empty()) return true;
  if (t.strides.size() != t.shape.size()) return false;
  // No elements: any strides describe the same (empty) tensor (numpy gives zeros, as for the
  // empty past key-values of a prompt step).
  for (int64_t d : t.shape)
    if (d == 0) return true;
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    // A dimension of size 1 may carry any stride (PyTorch gives such dims arbitrary ones).
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

}  // namespace

DType dtype_of(DlType t) {
  if (t.lanes != 1) return DType::Undefined;
  for (const Pair& p : kPairs)
    if (static_cast<uint8_t>(p.code) == t.code && p.bits == t.bits) return p.dtype;
  return DType::Undefined;
}

DlType dlpack_type_of(DType t) {
  for (const Pair& p : kPairs)
    if (p.dtype == t) return {static_cast<uint8_t>(p.code), p.bits, 1};
  fail("a tensor of dtype ", dtype_name(t), " has no DLPack type reforge hands out");
}

std::string dlpack_type_name(DlType t) {
  const char* code = "type";
  switch (static_cast<DlCode>(t.code)) {
    case DlCode::Int:
      code = "int";
      break;
    case DlCode::UInt:
      code = "uint";
      break;
    case DlCode::Float:
      code = "float";
      break;
    case DlCode::OpaqueHandle:
      code = "handle";
      break;
    case DlCode::Bfloat:
      code = "bfloat";
      break;
    case DlCode::Complex:
      code = "complex";
      break;
    case DlCode::Bool:
      code = "bool";
      break;
  }
  return str_cat(code, int(t.bits), t.lanes != 1 ? str_cat("x", int(t.lanes)) : std::string());
}

std::string dlpack_device_name(int32_t device_type, int32_t device_id) {
  const char* name = nullptr;
  switch (static_cast<DlDevice>(device_type)) {
    case DlDevice::Cpu:
      return "cpu";
    case DlDevice::Cuda:
      name = "cuda";
      break;
    case DlDevice::CudaHost:
      name = "cuda_host";
      break;
    case DlDevice::OpenCl:
      name = "opencl";
      break;
    case DlDevice::Vulkan:
      name = "vulkan";
      break;
    case DlDevice::Metal:
      name = "metal";
      break;
    case DlDevice::Vpi:
      name = "vpi";
      break;
    case DlDevice::Rocm:
      name = "rocm";
      break;
    case DlDevice::RocmHost:
      name = "rocm_host";
      break;
    case DlDevice::ExtDev:
      name = "ext_dev";
      break;
    case DlDevice::CudaManaged:
      name = "cuda_managed";
      break;
    case DlDevice::OneApi:
      name = "oneapi";
      break;
    case DlDevice::WebGpu:
      name = "webgpu";
      break;
    case DlDevice::Hexagon:
      name = "hexagon";
      break;
    case DlDevice::Maia:
      name = "maia";
      break;
  }
  if (!name) return str_cat("device type ", device_type);
  return str_cat(name, ":", device_id);
}

Tensor tensor_from_dlpack(const DlpackTensor& t, const std::string& what, DeviceUse device) {
  const DType dtype = dtype_of(t.dtype);
  if (dtype == DType::Undefined)
    fail(what, " has dtype ", dlpack_type_name(t.dtype), ", which reforge does not compute with");
  for (int64_t d : t.shape)
    if (d < 0) fail(what, " has a negative dimension in its shape ", shape_str(t.shape));
  if (!compact_row_major(t))
    fail(what, " is not laid out compact and row-major (shape ", shape_str(t.shape), ", strides ", shape_str(t.strides),
         "): make it contiguous first");
  Memory memory = Memory::Host;
  switch (static_cast<DlDevice>(t.device_type)) {
    case DlDevice::Cpu:
      break;
    case DlDevice::CudaHost:  // pinned host memory: the host reads it in place
      memory = Memory::Pinned;
      break;
    case DlDevice::Cuda:
    case DlDevice::CudaManaged:
      memory = Memory::Device;
      break;
    default:
      fail(what, " lives on ", dlpack_device_name(t.device_type, t.device_id),
           ", which reforge cannot read (it reads CPU, CUDA and CUDA host memory)");
  }
  if (memory == Memory::Device && device == DeviceUse::Refuse)
    fail(what, " lives on ", dlpack_device_name(t.device_type, t.device_id),
         ", but the plan runs on the CPU: give it in host memory, or build the plan for the device");
  const void* data = static_cast<const char*>(t.data) + t.byte_offset;
  Tensor wrapped = Tensor::wrap(dtype, Shape(t.shape.begin(), t.shape.end()), t.owner, data, memory);
  if (memory != Memory::Device || device == DeviceUse::InPlace) return wrapped;
  try {
    device_memory();
  } catch (const Error&) {
    fail(what, " lives on ", dlpack_device_name(t.device_type, t.device_id),
         " and this reforge has no device backend to copy it with (built without CUDA)");
  }
  return to_memory(wrapped, Memory::Host);
}

}  // namespace reforge::refit
