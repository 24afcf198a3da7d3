#include "npy.hpp"

#include <fstream>

#include "codec/core/error.hpp"

namespace codec::tools {

namespace {

void write(const std::string& path, const char* descr, const void* data, std::size_t elem,
           const std::vector<std::int64_t>& shape) {
  std::string dims;
  std::int64_t count = 1;
  for (std::int64_t d : shape) dims += std::to_string(d) + ", ", count *= d;
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(3,)" keeps its comma, "(3, 4)" does not
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + length (2) + header + '\n' is padded to a multiple of 64.
  const std::size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  CODEC_CHECK(out.good(), "cannot write '", path, "'");
  const std::uint16_t len = std::uint16_t(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(char(len & 0xff)).put(char(len >> 8));
  out << header;
  out.write(static_cast<const char*>(data), std::streamsize(count * std::int64_t(elem)));
  CODEC_CHECK(out.good(), "failed writing '", path, "'");
}

}  // namespace

void write_npy(const std::string& path, const float* data, const std::vector<std::int64_t>& shape) {
  write(path, "<f4", data, 4, shape);
}
void write_npy(const std::string& path, const std::int32_t* data, const std::vector<std::int64_t>& shape) {
  write(path, "<i4", data, 4, shape);
}
void write_npy(const std::string& path, const std::uint8_t* data, const std::vector<std::int64_t>& shape) {
  write(path, "|u1", data, 1, shape);
}

}  // namespace codec::tools
