#pragma once
// Minimal writer of NumPy .npy files (format version 1.0, little endian, C
// order), so a dumped run can be re-checked by any tool, and a reader of the
// byte arrays the tool takes as input (a custom mask).
#include <cstdint>
#include <string>
#include <vector>

namespace codec::tools {

void write_npy(const std::string& path, const float* data, const std::vector<std::int64_t>& shape);
void write_npy(const std::string& path, const std::int32_t* data, const std::vector<std::int64_t>& shape);
void write_npy(const std::string& path, const std::uint8_t* data, const std::vector<std::int64_t>& shape);

// The elements of a .npy file of uint8 or bool (format 1.0-3.0, C order, any
// shape), flattened; throws codec::Error naming the file and what is wrong.
struct NpyBytes {
  std::vector<std::uint8_t> data;
  bool boolean = false;  // bool elements (else uint8)
};
NpyBytes read_npy_bytes(const std::string& path);

}  // namespace codec::tools
