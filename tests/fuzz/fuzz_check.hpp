#pragma once
// Fuzz-target support: raw values read from the fuzzer's bytes, and checks of
// invariants that abort (a crash to libFuzzer, a failure to the replay test)
// when a reader accepts an input it should have refused or gets it wrong.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace codec::fuzz {

[[noreturn]] inline void violated(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, what);
  std::abort();
}

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) ::codec::fuzz::violated(__FILE__, __LINE__, #cond); \
  } while (0)

// Values taken from the front of the input, as a caller's buffers would hold
// them; zeros once the input runs out, so every input is a valid stream.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  template <typename T>
  T take() {
    T value{};
    const std::size_t n = size_ < sizeof(T) ? size_ : sizeof(T);
    if (n > 0) std::memcpy(&value, data_, n);
    data_ += n;
    size_ -= n;
    return value;
  }
  std::size_t left() const { return size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
};

}  // namespace codec::fuzz
