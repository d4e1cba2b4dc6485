// reforge error type.
//
// One exception type carries every failure that a user can act on. It holds the message and a
// chain of context lines ("while running node 'mlp/fc1' (MatMul)", "in file model.onnx"), most
// specific first. Untrusted input (ONNX, npy, plan, safetensors files) must always end in an
// Error, never in a crash or an abort; internal invariants use REFORGE_ASSERT, which also throws
// (so a bug in one model never takes down a serving process) but says that it is a bug.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace reforge {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message) : std::runtime_error(message), message_(std::move(message)) {}

  // Adds an outer context line; returns *this so callers can rethrow.
  Error& with_context(std::string ctx) {
    context_.push_back(std::move(ctx));
    full_ = render();
    return *this;
  }
  const std::string& message() const { return message_; }
  const std::vector<std::string>& context() const { return context_; }
  const char* what() const noexcept override { return context_.empty() ? message_.c_str() : full_.c_str(); }

 private:
  std::string render() const {
    std::string s = message_;
    for (const auto& c : context_) s += "\n  " + c;
    return s;
  }
  std::string message_;
  std::vector<std::string> context_;
  std::string full_;
};

namespace detail {
inline void stream_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void stream_all(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  stream_all(os, rest...);
}
}  // namespace detail

// Builds a message from streamable parts: fail("tensor '", name, "' has ", n, " elements").
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::stream_all(os, args...);
  throw Error(os.str());
}

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::stream_all(os, args...);
  return os.str();
}

}  // namespace reforge

#define REFORGE_CHECK(cond, ...)               \
  do {                                         \
    if (!(cond)) ::reforge::fail(__VA_ARGS__); \
  } while (0)

#define REFORGE_ASSERT(cond)                                                                                   \
  do {                                                                                                         \
    if (!(cond)) ::reforge::fail("internal error (bug in reforge): ", #cond, " at ", __FILE__, ":", __LINE__); \
  } while (0)
