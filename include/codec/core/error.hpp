#pragma once
// Errors: every public entry validates its input and throws codec::Error with a
// message naming the argument, the value and the expectation.
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace codec {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A CUDA call or launch failed: the input was fine, the device or driver was not.
class CudaError : public Error {
 public:
  using Error::Error;
};

// Whether messages end with the source location that threw ("[file:line]"):
// for developers, not for users. On in debug builds (no NDEBUG), off in
// release ones unless the environment sets CODEC_ERROR_LOCATIONS=1 or a tool
// calls set_error_locations(true) (the codec CLI's --verbose).
bool error_locations();
void set_error_locations(bool on);

// A string from the input as a message quotes it: its first `limit` bytes,
// with "..." after a cut, so that a message stays readable whatever a file
// holds. Cuts fall between UTF-8 characters (utf8_prefix).
std::string clip(std::string_view text, std::size_t limit = 60);
// The length of text's longest prefix of at most `limit` bytes that ends
// between UTF-8 characters.
std::size_t utf8_prefix(std::string_view text, std::size_t limit);

namespace detail {
template <typename E = Error, typename... Args>
[[noreturn]] void fail(const char* file, int line, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  if (error_locations()) os << " [" << file << ":" << line << "]";
  throw E(os.str());
}
}  // namespace detail

}  // namespace codec

// CODEC_CHECK(cond, "num_qo_heads ", hq, " is not a multiple of num_kv_heads ", hkv)
#define CODEC_CHECK(cond, ...)                                     \
  do {                                                             \
    if (!(cond)) ::codec::detail::fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define CODEC_FAIL(...) ::codec::detail::fail(__FILE__, __LINE__, __VA_ARGS__)
