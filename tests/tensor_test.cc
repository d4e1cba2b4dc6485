#include "core/tensor.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace reforge;

TEST(Tensor, CastFloatToInt) {
  Tensor t = Tensor::empty(DType::Float32, {3});
  float* p = t.mutable_data<float>();
  p[0] = 1.7f;
  p[1] = -2.5f;
  p[2] = 3.0f;
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
// used and freed just before, which for big storage means reused from the cache), all of it is
// writable, and big storage is unmapped on release when the cache is off.
TEST(Tensor, LargeAllocationsAlignedZeroedAndFreed) {
  const size_t limit = storage_cache_limit();
  set_storage_cache_limit(0);
  for (bool cached : {false, true}) {
    set_storage_cache_limit(cached ? size_t{64} << 20 : 0);
    for (int64_t floats : {int64_t{1000}, (int64_t{2} << 20) / 4 - 1, (int64_t{2} << 20) / 4,
                           (int64_t{2} << 20) / 4 + 1, int64_t{3'000'007}}) {
      SCOPED_TRACE(::testing::Message() << floats << (cached ? " cached" : " uncached"));
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
        EXPECT_EQ(reinterpret_cast<uintptr_t>(u.raw()) % (size_t{2} << 20), 0u);
        const void* at = u.raw();
        const size_t n = u.nbytes();
        Tensor view = u.reshaped({1, floats});  // shares the storage: still mapped after u goes
        u = Tensor();
        EXPECT_TRUE(mapped(at, n));
        view = Tensor();
        EXPECT_EQ(mapped(at, n), cached);
        EXPECT_EQ(storage_cache_held() >= n, cached);
      }
    }
    set_storage_cache_limit(0);
    EXPECT_EQ(storage_cache_held(), 0u);
  }
  set_storage_cache_limit(limit);
}

// Released big storage is handed to the next allocation of about its size (at most 1/8 longer),
// not to a much smaller one; an allocation that finds no fit first unmaps kept storage of at
// least its size (oldest first), and the cache keeps the newest mappings within its limit.
TEST(Tensor, ReleasedStorageIsReusedWithinLimits) {
  const size_t mb = size_t{1} << 20, limit = storage_cache_limit();
  set_storage_cache_limit(0);
  set_storage_cache_limit(40 * mb);
  const void* first = nullptr;
  {
    Tensor a = Tensor::uninitialized(DType::UInt8, {int64_t(16 * mb)});
    first = a.raw();
  }
  EXPECT_EQ(storage_cache_held(), 16 * mb);
  {
    Tensor same = Tensor::empty(DType::UInt8, {int64_t(15 * mb)});  // within 1/8: reused, and zeroed
    EXPECT_EQ(same.raw(), first);
    EXPECT_EQ(storage_cache_held(), 0u);
    const unsigned char* b = same.data<unsigned char>();
    size_t nonzero = 0;
    for (size_t i = 0; i < same.nbytes(); ++i) nonzero += b[i] != 0;
    EXPECT_EQ(nonzero, 0u);
    std::memset(same.mutable_raw(), 7, same.nbytes());
  }
  EXPECT_EQ(storage_cache_held(), 16 * mb);
  {
    Tensor small = Tensor::uninitialized(DType::UInt8, {int64_t(4 * mb)});  // 16 MB is too long for it
    EXPECT_NE(small.raw(), first);
    EXPECT_EQ(storage_cache_held(), 0u);  // the kept 16 MB made room for the new 4 MB
    EXPECT_FALSE(mapped(first, 16 * mb));
  }
  EXPECT_EQ(storage_cache_held(), 4 * mb);
  {
    Tensor b30 = Tensor::uninitialized(DType::UInt8, {int64_t(30 * mb)});
    Tensor b20 = Tensor::uninitialized(DType::UInt8, {int64_t(20 * mb)});
    EXPECT_EQ(storage_cache_held(), 0u);
    const void* at30 = b30.raw();
    b30 = Tensor();
    EXPECT_EQ(storage_cache_held(), 30 * mb);
    b20 = Tensor();  // 50 MB kept would pass the 40 MB limit: the oldest (30 MB) goes
    EXPECT_EQ(storage_cache_held(), 20 * mb);
    EXPECT_FALSE(mapped(at30, 30 * mb));
  }
  set_storage_cache_limit(0);
  EXPECT_EQ(storage_cache_held(), 0u);
  set_storage_cache_limit(limit);
}
