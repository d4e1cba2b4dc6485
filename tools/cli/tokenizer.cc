#include "tokenizer.h"

#include <dlfcn.h>

#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/regular_file.h"
#include "sentencepiece_api.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REFORGE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REFORGE_SANITIZED 1
#endif
#endif

namespace reforge::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPlugin = "libreforge_sentencepiece.so";
// Sentencepiece models are a few MB (Gemma's, 256k pieces, is 4 MB); a larger file is not one.
constexpr size_t kMaxModelBytes = size_t{256} << 20;
constexpr size_t kErrorBytes = 1024;

// The plugin's table, opened once per process (and never closed: the processors it makes live
// until exit).
const ReforgeSentencepieceApi& plugin() {
  static const ReforgeSentencepieceApi* api = []() -> const ReforgeSentencepieceApi* {
#ifdef REFORGE_SANITIZED
    fail("--tokenizer is not available in sanitizer builds: the sentencepiece plugin is opened with RTLD_DEEPBIND, "
         "which the sanitizers' runtimes refuse (use a Release build)");
#else
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const std::string path = ((ec ? fs::path(".") : exe.parent_path()) / kPlugin).string();
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!lib)
      fail("--tokenizer needs the sentencepiece plugin '", path, "', built with the CLI (target reforge): ",
           ::dlerror());
    auto get = reinterpret_cast<ReforgeSentencepieceApiFn>(::dlsym(lib, kReforgeSentencepieceApiSymbol));
    const ReforgeSentencepieceApi* table = get ? get(kReforgeSentencepieceApiVersion) : nullptr;
    if (!table)
      fail("the sentencepiece plugin '", path, "' is from another build of reforge (no interface version ",
           kReforgeSentencepieceApiVersion, "): rebuild the target reforge");
    return table;
#endif
  }();
  return *api;
}

[[noreturn]] void refuse_tokenizer_json(const std::string& path) {
  fail("--tokenizer '", path,
       "' is a Hugging Face tokenizer.json; the CLI reads sentencepiece models (tokenizer.model). Python's "
       "plan.generate(prompts, tokenizer='",
       path, "') reads tokenizer.json (pip install tokenizers); or give the CLI token ids with --input-ids");
}

bool is_json_object(const std::string& bytes) {
  for (char c : bytes) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    return c == '{';
  }
  return false;
}

}  // namespace

Tokenizer::Tokenizer(const ReforgeSentencepieceApi* api, void* processor, std::string path)
    : api_(api), processor_(processor), path_(std::move(path)) {}

Tokenizer::Tokenizer(Tokenizer&& other) noexcept
    : api_(other.api_), processor_(std::exchange(other.processor_, nullptr)), path_(std::move(other.path_)) {}

Tokenizer::~Tokenizer() {
  if (processor_) api_->close(processor_);
}

Tokenizer Tokenizer::open(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.model", ec)) {
      file = (dir / "tokenizer.model").string();
    } else if (fs::exists(dir / "tokenizer.json", ec)) {
      refuse_tokenizer_json((dir / "tokenizer.json").string());
    } else {
      fail("--tokenizer '", path, "' is a folder without tokenizer.model (a sentencepiece model)");
    }
  }
  const std::string bytes = read_regular_file(file, kMaxModelBytes, "--tokenizer");
  if (is_json_object(bytes)) refuse_tokenizer_json(file);
  const ReforgeSentencepieceApi& api = plugin();
  char err[kErrorBytes] = {};
  void* processor = api.open(bytes.data(), bytes.size(), err, sizeof err);
  if (!processor) fail("--tokenizer '", file, "' is not a sentencepiece model (tokenizer.model): ", err);
  Tokenizer t(&api, processor, file);
  if (api.piece_count(processor) <= 0) fail("--tokenizer '", file, "' is a sentencepiece model without pieces");
  return t;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool bos) const {
  std::vector<int64_t> out;
  if (bos && api_->bos_id(processor_) >= 0) out.push_back(api_->bos_id(processor_));
  char err[kErrorBytes] = {};
  const auto sink = [](void* context, int32_t id) { static_cast<std::vector<int64_t>*>(context)->push_back(id); };
  if (api_->encode(processor_, text.data(), text.size(), sink, &out, err, sizeof err) != 0)
    fail("cannot encode the prompt with --tokenizer '", path_, "': ", err);
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  const int64_t pieces = api_->piece_count(processor_);
  for (int64_t t : tokens) {
    if (t < 0 || t >= pieces)
      fail("token ", t, " is not in --tokenizer '", path_, "' (", pieces,
           " pieces): is it the model's tokenizer? (--input-ids without --tokenizer prints token ids)");
    ids.push_back(static_cast<int32_t>(t));
  }
  std::string text;
  char err[kErrorBytes] = {};
  const auto sink = [](void* context, const char* bytes, size_t size) {
    static_cast<std::string*>(context)->assign(bytes, size);
  };
  if (api_->decode(processor_, ids.data(), ids.size(), sink, &text, err, sizeof err) != 0)
    fail("cannot decode tokens with --tokenizer '", path_, "': ", err);
  return text;
}

int64_t Tokenizer::eos() const { return api_->eos_id(processor_); }

}  // namespace reforge::cli
