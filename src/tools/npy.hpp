#pragma once
// Minimal writer of NumPy .npy files (format version 1.0, little endian, C
// order), so a dumped run can be re-checked by any tool.
#include <cstdint>
#include <string>
#include <vector>

namespace codec::tools {

void write_npy(const std::string& path, const float* data, const std::vector<std::int64_t>& shape);
void write_npy(const std::string& path, const std::int32_t* data, const std::vector<std::int64_t>& shape);
void write_npy(const std::string& path, const std::uint8_t* data, const std::vector<std::int64_t>& shape);

}  // namespace codec::tools
