// session::TextStream, the incremental detokenizer of text generation, on a byte-level toy
// tokenizer (each token one byte string; decoding concatenates them and replaces each invalid
// UTF-8 byte with U+FFFD, and, as sentencepiece does, drops the leading space of what it decodes):
// a character spread over several tokens comes whole, the prompt's last tokens give the first
// piece its space, finish() gives back what is held, and the pieces concatenate to the text the
// whole sequence decodes to. python/tests/test_generate_text.py runs it with the real tokenizer
// libraries.
#include "session/text_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reforge {
namespace {

const std::vector<std::string> kVocab = {" the", " robot", "\xE6", "\x97", "\xA5", "a", "\xC3", "\xA9", " ", "x"};

// Bytes as UTF-8, each byte of an invalid or incomplete sequence replaced by U+FFFD.
std::string lossy(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string decode(const std::vector<int64_t>& tokens) {
  std::string s;
  for (int64_t t : tokens) s += kVocab[static_cast<size_t>(t)];
  if (!s.empty() && s[0] == ' ') s.erase(0, 1);
  return lossy(s);
}

// What push() returns for each token, then finish().
std::vector<std::string> stream(const std::vector<int64_t>& prompt, const std::vector<int64_t>& tokens) {
  session::TextStream s(decode, prompt);
  std::vector<std::string> pieces;
  for (int64_t t : tokens) pieces.push_back(s.push(t));
  pieces.push_back(s.finish());
  return pieces;
}

TEST(TextStream, MultiByteCharactersComeWhole) {
  // 日 (E6 97 A5) in three tokens, é (C3 A9) in two.
  const std::vector<std::string> want = {"", "", "日", "a", "", "é", ""};
  EXPECT_EQ(stream({0}, {2, 3, 4, 5, 6, 7}), want);
}

TEST(TextStream, TheFirstPieceKeepsItsSpace) {
  // Decoded alone, " robot" loses its space; after the prompt " the" it keeps it.
  EXPECT_EQ(decode({1}), "robot");
  const std::vector<std::string> want = {" robot", " the", ""};
  EXPECT_EQ(stream({0}, {1, 0}), want);
  // Without a prompt the text starts as the tokenizer starts it.
  const std::vector<std::string> bare = {"robot", " the", ""};
  EXPECT_EQ(stream({}, {1, 0}), bare);
}

TEST(TextStream, FinishGivesBackAnUnfinishedCharacter) {
  session::TextStream s(decode, {0});
  EXPECT_EQ(s.push(2), "");
  EXPECT_EQ(s.push(3), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // as the tokenizer decodes E6 97
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.text(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TextStream, PiecesConcatenateToTheDecodedSequence) {
  // Every sequence of 6 tokens over a vocabulary of bytes, spaces and broken characters: the
  // pieces are the text the whole sequence adds to the prompt's.
  const std::vector<int64_t> prompt = {0, 1, 5, 5, 5, 5, 5, 1};  // longer than the prompt context
  const std::string before = decode(prompt);
  for (int64_t code = 0; code < 1000000; code += 7) {
    std::vector<int64_t> tokens;
    for (int64_t c = code, k = 0; k < 6; ++k, c /= 10) tokens.push_back(c % 10);
    session::TextStream s(decode, prompt);
    std::string joined;
    for (int64_t t : tokens) joined += s.push(t);
    joined += s.finish();
    std::vector<int64_t> all = prompt;
    all.insert(all.end(), tokens.begin(), tokens.end());
    ASSERT_EQ(joined, decode(all).substr(before.size())) << "sequence " << code;
    ASSERT_EQ(joined, s.text());
  }
}

}  // namespace
}  // namespace reforge
