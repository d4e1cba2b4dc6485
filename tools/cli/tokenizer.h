// The CLI's tokenizer for text prompts (`reforge generate --prompt TEXT --tokenizer PATH`): a thin
// wrapper over Google's sentencepiece library (Debian's libsentencepiece-dev), which reads the
// `tokenizer.model` of Llama-, Mistral-, Gemma- and T5-family checkpoints. It encodes a prompt and
// decodes generated tokens; incremental decoding for streaming is the library's
// (session/text_stream.h), shared with Python. The library is reached through a plugin beside the
// executable, libreforge_sentencepiece.so (sentencepiece_api.h says why), opened on first use.
//
// A Hugging Face `tokenizer.json` is refused with a message that says where it is read: no
// maintained C++ library for that format is packaged as a library in Debian 12 or on PyPI (the
// implementations there ship inside Python wheels: onnxruntime-extensions' as a CPython extension
// module, onnxruntime-genai's needing ONNX Runtime loaded, neither with headers), and reforge never
// implements a tokenizer by hand. Python's plan.generate reads tokenizer.json through the
// `tokenizers` package; token ids (--input-ids) work with any tokenizer.
//
// What a file is, is decided by its content, not its name: a JSON object is a tokenizer.json,
// anything else must parse as a sentencepiece model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct ReforgeSentencepieceApi;

namespace reforge::cli {

class Tokenizer {
 public:
  // `path`: a sentencepiece model file, or a folder holding `tokenizer.model`. Throws an Error
  // naming the path for anything else (a tokenizer.json among them, saying where it is read).
  static Tokenizer open(const std::string& path);
  Tokenizer(Tokenizer&& other) noexcept;
  Tokenizer& operator=(Tokenizer&&) = delete;
  ~Tokenizer();

  // The token ids of `text`, after the model's beginning-of-sequence id when `bos` and the model
  // defines one (Llama-family models expect it, as transformers' and ONNX Runtime GenAI's
  // tokenizers add it).
  std::vector<int64_t> encode(const std::string& text, bool bos) const;
  // The text of `tokens` (control tokens such as BOS and EOS decode to nothing). Throws an Error
  // for an id the model does not have.
  std::string decode(const std::vector<int64_t>& tokens) const;
  // The end-of-sequence id, -1 when the model defines none.
  int64_t eos() const;
  // What was opened, for messages: the model file's path.
  const std::string& path() const { return path_; }

 private:
  Tokenizer(const ReforgeSentencepieceApi* api, void* processor, std::string path);
  const ReforgeSentencepieceApi* api_;
  void* processor_;  // owned; null after a move
  std::string path_;
};

}  // namespace reforge::cli
