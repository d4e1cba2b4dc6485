#include "session/text_stream.h"

#include <algorithm>
#include <utility>

namespace reforge::session {

namespace {

// Prompt tokens decoded as context before the first new token (text-generation-inference and
// vLLM take 5): enough for a character or a word piece that spans the prompt's last tokens.
constexpr size_t kPromptContext = 5;

bool ends_unfinished(const std::string& s) {
  // U+FFFD, REPLACEMENT CHARACTER, in UTF-8: what a decoder makes of an incomplete byte sequence.
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// Where `text` stops agreeing with `before`, moved back to the start of a UTF-8 character so that
// the piece after it is valid UTF-8 (before.size() whenever `text` extends `before`).
size_t common_prefix(const std::string& before, const std::string& text) {
  const size_t n = std::min(before.size(), text.size());
  size_t i = static_cast<size_t>(std::mismatch(before.begin(), before.begin() + static_cast<std::ptrdiff_t>(n),
                                               text.begin()).first -
                                 before.begin());
  if (i == before.size()) return i;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

TextStream::TextStream(Decode decode, std::vector<int64_t> prompt)
    : decode_(std::move(decode)), tokens_(std::move(prompt)) {
  read_ = tokens_.size();
  prefix_ = read_ > kPromptContext ? read_ - kPromptContext : 0;
}

std::string TextStream::push(int64_t token) {
  tokens_.push_back(token);
  return next(false);
}

std::string TextStream::finish() { return next(true); }

std::string TextStream::next(bool final) {
  if (read_ == tokens_.size()) return "";
  const auto first = tokens_.begin() + static_cast<std::ptrdiff_t>(prefix_);
  const std::string before = decode_(std::vector<int64_t>(first, tokens_.begin() + static_cast<std::ptrdiff_t>(read_)));
  const std::string now = decode_(std::vector<int64_t>(first, tokens_.end()));
  const size_t cut = common_prefix(before, now);
  if (now.size() <= cut || (!final && ends_unfinished(now))) return "";
  std::string piece = now.substr(cut);
  prefix_ = read_;
  read_ = tokens_.size();
  text_ += piece;
  return piece;
}

}  // namespace reforge::session
