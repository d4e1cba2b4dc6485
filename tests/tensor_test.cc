#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

using namespace reforge;

TEST(Tensor, CastFloatToInt) {
  Tensor t = Tensor::empty(DType::Float32, {3});
  float* p = t.mutable_data<float>();
  p[0] = 1.7f; p[1] = -2.5f; p[2] = 3.0f;
  Tensor i = cast_tensor(t, DType::Int64);
  EXPECT_EQ(i.to_int64_vector(), (std::vector<int64_t>{1, -2, 3}));
}

TEST(Tensor, HalfRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(static_cast<float>(float16(f)), f);
  }
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f)), 1.0f);
}

namespace {
// True when every page of [p, p + n) is mapped in this process (mincore fails with ENOMEM on
// unmapped pages).
bool mapped(const void* p, size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  auto a = reinterpret_cast<uintptr_t>(p) / page * page;
  size_t len = reinterpret_cast<uintptr_t>(p) + n - a;
  std::vector<unsigned char> v((len + page - 1) / page);
  return mincore(reinterpret_cast<void*>(a), len, v.data()) == 0;
}
}  // namespace

// Sizes around the 2 MiB line where storage moves from the heap to its own huge-page mapping:
// every allocation is 64-byte aligned, empty() is zero in every byte (also when the memory was
// used and freed just before), all of it is writable, and big storage is unmapped on release.
TEST(Tensor, LargeAllocationsAlignedZeroedAndFreed) {
  for (int64_t floats : {int64_t{1000}, (int64_t{2} << 20) / 4 - 1, (int64_t{2} << 20) / 4, (int64_t{2} << 20) / 4 + 1,
                         int64_t{3'000'007}}) {
    SCOPED_TRACE(floats);
    for (int round = 0; round < 2; ++round) {
      Tensor t = Tensor::empty(DType::Float32, {floats});
      ASSERT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
      const unsigned char* b = static_cast<const unsigned char*>(t.raw());
      size_t nonzero = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) nonzero += b[i] != 0;
      EXPECT_EQ(nonzero, 0u);
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < floats; ++i) p[i] = 1.0f;  // dirty it for the next round
    }
    Tensor u = Tensor::uninitialized(DType::Float32, {floats});
    ASSERT_EQ(reinterpret_cast<uintptr_t>(u.raw()) % 64, 0u);
    float* q = u.mutable_data<float>();
    for (int64_t i = 0; i < floats; ++i) q[i] = static_cast<float>(i);
    EXPECT_EQ(u.data<float>()[floats - 1], static_cast<float>(floats - 1));
    if (u.nbytes() >= (size_t{2} << 20)) {
      const void* at = u.raw();
      const size_t n = u.nbytes();
      Tensor view = u.reshaped({1, floats});  // shares the storage: still mapped after u goes
      u = Tensor();
      EXPECT_TRUE(mapped(at, n));
      view = Tensor();
      EXPECT_FALSE(mapped(at, n));
    }
  }
}
