// The C ABI between the CLI (tools/cli/tokenizer.cc) and its sentencepiece plugin
// (tools/cli/sentencepiece/plugin.cc, built as libreforge_sentencepiece.so beside the `reforge`
// executable).
//
// Why a plugin: Debian's libsentencepiece carries its own copy of protobuf-lite (3.x, older than
// the system's libprotobuf 3.21 the ONNX importer links) and exports every symbol of it. Linked
// into the CLI, the two copies interpose: libprotobuf's static initialization calls into
// sentencepiece's copy, and the process crashes before main(). The plugin is therefore the only
// object that links libsentencepiece, and the CLI opens it with dlopen(RTLD_LOCAL | RTLD_DEEPBIND):
// its symbols stay out of the process's global scope, and its own references bind to its own
// protobuf first. The interface is plain C (no C++ types or exceptions cross it) and versioned:
// the CLI asks for the version it was built with.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

inline constexpr uint32_t kReforgeSentencepieceApiVersion = 1;

// Functions that report failure return nonzero and write a NUL-terminated message into
// err[0..err_size).
struct ReforgeSentencepieceApi {
  uint32_t version;
  // A processor for the serialized model `model` [size bytes] (a tokenizer.model file's bytes);
  // null on failure.
  void* (*open)(const char* model, size_t size, char* err, size_t err_size);
  void (*close)(void* processor);
  int32_t (*piece_count)(const void* processor);
  int32_t (*bos_id)(const void* processor);  // -1: none
  int32_t (*eos_id)(const void* processor);  // -1: none
  // The ids of UTF-8 `text` [size bytes], each passed to sink(context, id).
  int (*encode)(const void* processor, const char* text, size_t size, void (*sink)(void* context, int32_t id),
                void* context, char* err, size_t err_size);
  // The UTF-8 text of ids[0..count), passed once to sink(context, text, size).
  int (*decode)(const void* processor, const int32_t* ids, size_t count,
                void (*sink)(void* context, const char* text, size_t size), void* context, char* err,
                size_t err_size);
};

// The plugin's one exported symbol: its table for `version`, or null when it has none.
using ReforgeSentencepieceApiFn = const ReforgeSentencepieceApi* (*)(uint32_t version);
inline constexpr const char* kReforgeSentencepieceApiSymbol = "reforge_sentencepiece_api";
}
