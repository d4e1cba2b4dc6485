// The DLPack reader (refit/dlpack.h): host tensors are wrapped in place with the dtype DLPack's
// (code, bits) names; what reforge cannot read (another dtype, several lanes, a strided layout,
// memory it has no way to reach) is refused naming the tensor before any byte is read.
#include "refit/dlpack.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "support/cuda_compare.h"
#include "support/engine_checks.h"

using namespace reforge;
using refit::DlCode;
using refit::DlDevice;
using test_support::error_of;

namespace {

// A DLPack view of `values` (host memory), shape as given, compact unless `strides` is set.
template <typename T>
refit::DlpackTensor view_of(std::vector<T>& values, refit::DlType type, std::vector<int64_t> shape,
                            std::vector<int64_t> strides = {}) {
  refit::DlpackTensor t;
  t.data = values.data();
  t.dtype = type;
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  return t;
}

refit::DlType type(DlCode code, uint8_t bits, uint16_t lanes = 1) { return {static_cast<uint8_t>(code), bits, lanes}; }

}  // namespace

// Every dtype the reader knows, against the table DLPack's header gives (dlpack.h, DLDataTypeCode):
// the (code, bits) pair reads as that dtype and the dtype hands out that pair.
TEST(Dlpack, DtypesMatchDlpacksCodes) {
  const std::vector<std::pair<refit::DlType, DType>> table = {
      {type(DlCode::Float, 32), DType::Float32}, {type(DlCode::Float, 64), DType::Float64},
      {type(DlCode::Float, 16), DType::Float16}, {type(DlCode::Bfloat, 16), DType::BFloat16},
      {type(DlCode::Int, 8), DType::Int8},       {type(DlCode::Int, 16), DType::Int16},
      {type(DlCode::Int, 32), DType::Int32},     {type(DlCode::Int, 64), DType::Int64},
      {type(DlCode::UInt, 8), DType::UInt8},     {type(DlCode::UInt, 16), DType::UInt16},
      {type(DlCode::UInt, 32), DType::UInt32},   {type(DlCode::UInt, 64), DType::UInt64},
      {type(DlCode::Bool, 8), DType::Bool},
  };
  for (const auto& [dl, dtype] : table) {
    SCOPED_TRACE(refit::dlpack_type_name(dl));
    EXPECT_EQ(refit::dtype_of(dl), dtype);
    const refit::DlType back = refit::dlpack_type_of(dtype);
    EXPECT_EQ(back.code, dl.code);
    EXPECT_EQ(back.bits, dl.bits);
    EXPECT_EQ(back.lanes, 1);
  }
  EXPECT_EQ(refit::dtype_of(type(DlCode::Complex, 64)), DType::Undefined);
  EXPECT_EQ(refit::dtype_of(type(DlCode::Float, 32, 4)), DType::Undefined);
  EXPECT_EQ(refit::dtype_of(type(DlCode::Float, 8)), DType::Undefined);
  EXPECT_NE(error_of([] { refit::dlpack_type_of(DType::Complex64); }).find("complex64"), std::string::npos);
}

TEST(Dlpack, HostTensorsAreWrappedInPlace) {
  std::vector<float> values(6);
  std::iota(values.begin(), values.end(), 0.5f);
  auto keep = std::make_shared<int>(0);
  refit::DlpackTensor v = view_of(values, type(DlCode::Float, 32), {2, 3});
  v.owner = keep;
  const long owners = keep.use_count();
  const Tensor t = refit::tensor_from_dlpack(v, "weight 'w'");
  EXPECT_EQ(t.dtype(), DType::Float32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.raw(), values.data()) << "wrapped, not copied";
  EXPECT_EQ(t.as_double(5), 5.5);
  EXPECT_EQ(keep.use_count(), owners + 1) << "the tensor keeps the owner alive";

  // byte_offset moves the start; CUDA pinned host memory is read in place too; explicit compact
  // strides, and any stride on a dimension of size 1, are compact.
  v.byte_offset = sizeof(float) * 3;
  v.shape = {1, 3};
  v.strides = {999, 1};
  v.device_type = static_cast<int32_t>(DlDevice::CudaHost);
  const Tensor tail = refit::tensor_from_dlpack(v, "weight 'w'");
  EXPECT_EQ(tail.raw(), values.data() + 3);
  EXPECT_EQ(tail.as_double(0), 3.5);

  std::vector<uint16_t> bf16 = {0x3fc0};  // 1.5 in bfloat16
  const Tensor b = refit::tensor_from_dlpack(view_of(bf16, type(DlCode::Bfloat, 16), {1}), "weight 'b'");
  EXPECT_EQ(b.dtype(), DType::BFloat16);
  EXPECT_EQ(b.as_double(0), 1.5);
}

TEST(Dlpack, WhatCannotBeReadIsRefusedNamingTheTensor) {
  std::vector<float> values(6, 1.0f);
  struct Case {
    const char* what;
    refit::DlpackTensor t;
    std::string expected;
  };
  std::vector<Case> cases;
  cases.push_back({"transposed", view_of(values, type(DlCode::Float, 32), {3, 2}, {1, 3}),
                   "'w' is not laid out compact and row-major (shape [3,2], strides [1,3])"});
  cases.push_back({"complex", view_of(values, type(DlCode::Complex, 64), {3}),
                   "'w' has dtype complex64, which reforge does not compute with"});
  cases.push_back({"lanes", view_of(values, type(DlCode::Float, 32, 2), {3}),
                   "'w' has dtype float32x2, which reforge does not compute with"});
  refit::DlpackTensor rocm = view_of(values, type(DlCode::Float, 32), {6});
  rocm.device_type = static_cast<int32_t>(DlDevice::Rocm);
  rocm.device_id = 1;
  cases.push_back({"rocm", rocm, "'w' lives on rocm:1, which reforge cannot read"});
  refit::DlpackTensor odd = view_of(values, type(DlCode::Float, 32), {6});
  odd.device_type = 42;
  cases.push_back({"unknown device", odd, "'w' lives on device type 42"});
  cases.push_back(
      {"negative", view_of(values, type(DlCode::Float, 32), {-1}), "'w' has a negative dimension in its shape [-1]"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string err = error_of([&] { refit::tensor_from_dlpack(c.t, "weight 'w'"); });
    EXPECT_NE(err.find("weight " + c.expected), std::string::npos) << err;
  }
}

// Device memory is copied to the host through the device backend (here, where a GPU is), and
// refused naming the tensor where this reforge has no device backend.
TEST(Dlpack, DeviceMemoryIsCopiedToTheHost) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f};
  refit::DlpackTensor v = view_of(values, type(DlCode::Float, 32), {3});
  v.device_type = static_cast<int32_t>(DlDevice::Cuda);
  if (!test_support::kBuiltWithCuda) {
    const std::string err = error_of([&] { refit::tensor_from_dlpack(v, "weight 'w'"); });
    EXPECT_NE(err.find("weight 'w' lives on cuda:0 and this reforge has no device backend"), std::string::npos) << err;
    return;
  }
  REQUIRE_GPU();
  const Tensor on_device = to_memory(Tensor::copy_of(DType::Float32, {3}, values.data()), Memory::Device);
  v.data = on_device.raw();
  v.owner = std::make_shared<Tensor>(on_device);
  const Tensor host = refit::tensor_from_dlpack(v, "weight 'w'");
  ASSERT_TRUE(host.on_host());
  EXPECT_NE(host.raw(), on_device.raw());
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(host.as_double(i), values[static_cast<size_t>(i)]);
}

// Run inputs: a device plan's are wrapped in device memory as they are (no copy, no device needed
// to wrap them), a host plan's are refused naming the tensor before anything is read; host memory
// is wrapped in place either way.
TEST(Dlpack, RunInputsInDeviceMemoryAreWrappedOrRefused) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f};
  auto keep = std::make_shared<int>(0);
  refit::DlpackTensor v = view_of(values, type(DlCode::Float, 32), {2, 2});
  v.owner = keep;
  v.device_type = static_cast<int32_t>(DlDevice::Cuda);
  const long owners = keep.use_count();
  const Tensor on_device = refit::tensor_from_dlpack(v, "input 'x'", refit::DeviceUse::InPlace);
  EXPECT_EQ(on_device.memory(), Memory::Device);
  EXPECT_EQ(on_device.raw(), values.data()) << "wrapped, not copied";
  EXPECT_EQ(on_device.dtype(), DType::Float32);
  EXPECT_EQ(on_device.shape(), (Shape{2, 2}));
  EXPECT_EQ(keep.use_count(), owners + 1) << "the tensor keeps the owner alive";
  v.device_type = static_cast<int32_t>(DlDevice::CudaManaged);
  EXPECT_EQ(refit::tensor_from_dlpack(v, "input 'x'", refit::DeviceUse::InPlace).memory(), Memory::Device);

  v.device_type = static_cast<int32_t>(DlDevice::Cuda);
  v.device_id = 1;
  const std::string err = error_of([&] { refit::tensor_from_dlpack(v, "input 'x'", refit::DeviceUse::Refuse); });
  EXPECT_NE(err.find("input 'x' lives on cuda:1, but the plan runs on the CPU"), std::string::npos) << err;
  // The checks of layout and dtype come first, for every use.
  v.strides = {1, 2};
  const std::string strided = error_of([&] { refit::tensor_from_dlpack(v, "input 'x'", refit::DeviceUse::InPlace); });
  EXPECT_NE(strided.find("input 'x' is not laid out compact and row-major"), std::string::npos) << strided;

  refit::DlpackTensor host = view_of(values, type(DlCode::Float, 32), {4});
  for (refit::DeviceUse use : {refit::DeviceUse::InPlace, refit::DeviceUse::Refuse}) {
    const Tensor t = refit::tensor_from_dlpack(host, "input 'x'", use);
    EXPECT_EQ(t.memory(), Memory::Host);
    EXPECT_EQ(t.raw(), values.data());
    EXPECT_EQ(t.as_double(3), 4.0);
  }
}
