#include "npy.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>

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

// The value of `key` in a .npy header's dict literal, as written (quotes and
// parentheses included), or "" where it is absent.
std::string header_value(const std::string& header, const std::string& key) {
  std::smatch m;
  const std::regex value("'" + key + R"('\s*:\s*('[^']*'|True|False|\([^)]*\)))");
  return std::regex_search(header, m, value) ? m[1].str() : std::string();
}

}  // namespace

NpyBytes read_npy_bytes(const std::string& path) {
  constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t(1) << 32;
  constexpr std::size_t kMaxHeaderBytes = 1 << 12;  // numpy writes a few hundred; std::regex recurses per character
  std::error_code size_error;
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, size_error);
  CODEC_CHECK(!size_error, "cannot read '", clip(path), "': ", size_error.message());
  CODEC_CHECK(file_bytes <= kMaxFileBytes, "'", clip(path), "' has ", file_bytes, " bytes, more than the ",
              kMaxFileBytes, " read");
  std::ifstream in(path, std::ios::binary);
  CODEC_CHECK(in.good(), "cannot read '", clip(path), "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CODEC_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0, "'", clip(path),
              "' is not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  CODEC_CHECK(major >= 1 && major <= 3, "'", clip(path), "': .npy format version ", major, " (1 to 3 are read)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  CODEC_CHECK(bytes.size() >= 8 + len_bytes, "'", clip(path), "': truncated header");
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i)
    header_len |= std::size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  CODEC_CHECK(header_len <= kMaxHeaderBytes, "'", clip(path), "': header of ", header_len, " bytes, more than ",
              kMaxHeaderBytes);
  const std::size_t data_begin = 8 + len_bytes + header_len;
  CODEC_CHECK(data_begin <= bytes.size(), "'", clip(path), "': header of ", header_len, " bytes past the file's end");
  const std::string header = bytes.substr(8 + len_bytes, header_len);
  const std::string descr = header_value(header, "descr");
  CODEC_CHECK(descr == "'|u1'" || descr == "'|b1'" || descr == "'<u1'", "'", clip(path), "': dtype ",
              descr.empty() ? std::string("missing") : clip(descr), "; expected uint8 or bool ('|u1' or '|b1')");
  CODEC_CHECK(header_value(header, "fortran_order") == "False", "'", clip(path), "': fortran_order is not False");
  const std::string shape = header_value(header, "shape");
  CODEC_CHECK(!shape.empty(), "'", clip(path), "': no shape in the header");
  std::uint64_t count = 1;
  const std::regex digits_re(R"(\d+)");
  for (std::sregex_iterator it(shape.begin(), shape.end(), digits_re), end; it != end; ++it) {
    const std::string digits = it->str();
    CODEC_CHECK(digits.size() <= 18, "'", clip(path), "': shape ", clip(shape), " is too large");
    const std::uint64_t dim = std::stoull(digits);
    CODEC_CHECK(dim == 0 || count <= std::numeric_limits<std::uint64_t>::max() / dim, "'", clip(path), "': shape ",
                clip(shape), " is too large");
    count *= dim;
  }
  CODEC_CHECK(bytes.size() - data_begin == count, "'", clip(path), "': shape ", clip(shape), " holds ", count,
              " elements, the file ", bytes.size() - data_begin, " bytes of data");
  return {{bytes.begin() + std::ptrdiff_t(data_begin), bytes.end()}, descr == "'|b1'"};
}

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
