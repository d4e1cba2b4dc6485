// Internal to the plan writer (plan_io.cc) and reader (plan_read.cc): header layout, name tables
// and the string/hash encodings both sides share. docs/plan-format.md is the spec; keep the two
// in step.
#pragma once

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "ir/graph.h"
#include "plan/plan.h"

namespace reforge::plan::format {

inline constexpr unsigned char kMagic[8] = {0x89, 'R', 'F', 'P', 'L', 'A', 'N', '\n'};
inline constexpr size_t kHeaderSize = 64;
inline constexpr uint64_t kAlign = 64;

// Byte offsets of the header fields (all little-endian).
inline constexpr size_t kOffVersion = 8;      // u32 format version
inline constexpr size_t kOffHeaderSize = 12;  // u32 header size (64)
inline constexpr size_t kOffMetaOffset = 16;  // u64 metadata offset (= header size)
inline constexpr size_t kOffMetaSize = 24;    // u64 metadata size
inline constexpr size_t kOffDataOffset = 32;  // u64 data section offset (multiple of 64)
inline constexpr size_t kOffDataSize = 40;    // u64 data section size
inline constexpr size_t kOffMetaHash = 48;    // u64 XXH3-64 of the metadata bytes
inline constexpr size_t kOffHeaderHash = 56;  // u64 XXH3-64 of header bytes [0, 56)

// XXH3-64, seed 0. On x86-64 through libxxhash's dispatcher, which picks the widest vector unit
// the CPU has at run time (AVX2: about 2.5x the baseline SSE2 code); the value is the same.
inline uint64_t hash_bytes(const void* p, size_t n) {
#if defined(__x86_64__)
  return XXH3_64bits_dispatch(p, n);
#else
  return XXH3_64bits(p, n);
#endif
}

// Weights larger than one piece also record the hash of each kPiece-byte piece ("xxh3_pieces"),
// so that a reader can verify one large weight on all threads at once.
inline constexpr uint64_t kPiece = uint64_t{4} << 20;

inline uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

inline void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Hashes are written as 16 lower-case hex digits (JSON numbers above 2^53 confuse many tools).
inline std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 15];
  return s;
}
inline std::optional<uint64_t> parse_hex64(const std::string& s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

// Strings that are not valid UTF-8 (ONNX string attributes are bytes) are written as
// {"hex": "..."}; JSON strings must be UTF-8.
bool valid_utf8(const std::string& s);
std::string to_hex(const std::string& bytes);
std::optional<std::string> from_hex(const std::string& hex);

const char* attr_type_name(ir::AttrType t);
std::optional<ir::AttrType> attr_type_from_name(const std::string& s);
const char* operand_kind_name(Operand::Kind k);
std::optional<Operand::Kind> operand_kind_from_name(const std::string& s);
std::optional<BuildMode> build_mode_from_name(const std::string& s);
std::optional<Precision> precision_from_name(const std::string& s);
std::optional<WeightKind> weight_kind_from_name(const std::string& s);
std::optional<WeightPacking> weight_packing_from_name(const std::string& s);

}  // namespace reforge::plan::format
