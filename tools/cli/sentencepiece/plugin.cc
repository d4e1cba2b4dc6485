// libreforge_sentencepiece.so: Google's sentencepiece library behind the plain C table of
// tools/cli/sentencepiece_api.h (why it is a plugin is said there). Only this object links
// libsentencepiece; nothing here throws across the table.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../sentencepiece_api.h"

namespace {

using sentencepiece::SentencePieceProcessor;

void set_error(char* err, size_t err_size, const std::string& message) {
  if (err_size == 0) return;
  const size_t n = std::min(message.size(), err_size - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

const SentencePieceProcessor& sp(const void* p) { return *static_cast<const SentencePieceProcessor*>(p); }

void* model_open(const char* model, size_t size, char* err, size_t err_size) {
  try {
    auto p = std::make_unique<SentencePieceProcessor>();
    const auto status = p->LoadFromSerializedProto(std::string_view(model, size));
    if (!status.ok()) {
      set_error(err, err_size, status.ToString());
      return nullptr;
    }
    return p.release();
  } catch (const std::exception& e) {
    set_error(err, err_size, e.what());
    return nullptr;
  }
}

void model_close(void* p) { delete static_cast<SentencePieceProcessor*>(p); }
int32_t model_piece_count(const void* p) { return sp(p).GetPieceSize(); }
int32_t model_bos_id(const void* p) { return sp(p).bos_id(); }
int32_t model_eos_id(const void* p) { return sp(p).eos_id(); }

int model_encode(const void* p, const char* text, size_t size, void (*sink)(void*, int32_t), void* context, char* err,
           size_t err_size) {
  try {
    std::vector<int> ids;
    const auto status = sp(p).Encode(std::string_view(text, size), &ids);
    if (!status.ok()) {
      set_error(err, err_size, status.ToString());
      return 1;
    }
    for (int id : ids) sink(context, id);
    return 0;
  } catch (const std::exception& e) {
    set_error(err, err_size, e.what());
    return 1;
  }
}

int model_decode(const void* p, const int32_t* ids, size_t count, void (*sink)(void*, const char*, size_t), void* context,
           char* err, size_t err_size) {
  try {
    std::string text;
    const auto status = sp(p).Decode(std::vector<int>(ids, ids + count), &text);
    if (!status.ok()) {
      set_error(err, err_size, status.ToString());
      return 1;
    }
    sink(context, text.data(), text.size());
    return 0;
  } catch (const std::exception& e) {
    set_error(err, err_size, e.what());
    return 1;
  }
}

const ReforgeSentencepieceApi kApi = {kReforgeSentencepieceApiVersion, model_open,      model_close,
                                      model_piece_count,               model_bos_id,    model_eos_id,
                                      model_encode,                    model_decode};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ReforgeSentencepieceApi* reforge_sentencepiece_api(
    uint32_t version) {
  return version == kReforgeSentencepieceApiVersion ? &kApi : nullptr;
}
