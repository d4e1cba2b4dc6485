// Incremental detokenization: the text of a growing token sequence, streamed in pieces as the
// tokens are made (`reforge generate --prompt` and Python's plan.generate with text prompts).
//
// Decoding each token on its own is wrong: a byte-level tokenizer (GPT-2's, or byte fallback in a
// sentencepiece or tokenizer.json model) spreads one multi-byte character over several tokens,
// and a lone part decodes to U+FFFD; a sentencepiece tokenizer drops the leading space of the
// first token it decodes, so " world" after "Hello" would come out as "world". So the stream
// decodes a short window of the sequence twice, with and without the tokens not yet emitted, and
// emits the difference; the window starts at the last piece's tokens (at first, the prompt's last
// few), the context that decides the new text's spaces and bytes. While the decoded text ends in
// U+FFFD (a character not finished yet) it waits for more tokens. This is the scheme of Hugging
// Face's text-generation-inference and vLLM: each step decodes a few tokens, not the sequence.
//
// The prompt is context, never emitted: the first piece is what the new tokens add to the
// prompt's text, with the space that joins them. finish() emits what is held back at the end (an
// unfinished character, as the tokenizer decodes it), so the pieces always concatenate to
// text(). For the tokenizers reforge reads, text() equals decode(prompt + tokens) less its first
// decode(prompt).size() bytes, the text transformers' text-generation pipeline returns with
// return_full_text=False.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace reforge::session {

class TextStream {
 public:
  // The tokenizer's decoding of a token sequence to UTF-8 text (special tokens left out).
  using Decode = std::function<std::string(const std::vector<int64_t>& tokens)>;

  TextStream(Decode decode, std::vector<int64_t> prompt);

  // Adds a generated token; returns the text it completes ("" while a character is unfinished).
  std::string push(int64_t token);
  // Returns the text still held back (after the last token); the stream may go on afterwards.
  std::string finish();
  // Every piece returned so far, concatenated.
  const std::string& text() const { return text_; }

 private:
  std::string next(bool final);

  Decode decode_;
  std::vector<int64_t> tokens_;
  size_t prefix_ = 0;  // the window's first token: context, decoded but already emitted
  size_t read_ = 0;    // the first token whose text is not emitted yet
  std::string text_;
};

}  // namespace reforge::session
