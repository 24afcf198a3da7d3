#pragma once
// Storage dtypes and exact host-side conversions of 16- and 8-bit floats.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace codec {

// e4m3 is OCP's E4M3FN (torch.float8_e4m3fn: no infinities, ±448 at most,
// NaN 0x7f/0xff), e5m2 OCP's E5M2 (torch.float8_e5m2: IEEE-like); both KV
// cache dtypes only, under 16- or 32-bit queries.
enum class DType : std::uint8_t { f16, bf16, f32, e4m3, e5m2 };

std::string_view to_string(DType dtype);  // "fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2"
// "fp16"/"f16", "bf16", "fp32"/"f32", "fp8_e4m3"/"float8_e4m3fn"/"fp8" (e4m3), "fp8_e5m2"/"float8_e5m2"
DType parse_dtype(std::string_view name);
inline bool is_fp8(DType dtype) { return dtype == DType::e4m3 || dtype == DType::e5m2; }
[[noreturn]] void throw_not_a_query_dtype(DType dtype);  // codec::Error: fp8 where q's or out's dtype goes
inline std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : is_fp8(dtype) ? 1 : 2; }

// IEEE binary16 and bfloat16 kept as raw bits on the host; the CUDA engine uses
// the toolkit's types, which share this layout.
struct f16_t {
  std::uint16_t bits;
};
struct bf16_t {
  std::uint16_t bits;
};

float f16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);  // round to nearest even

inline float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}
inline std::uint16_t float_to_bf16(float value) {  // round to nearest even
  std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

struct e4m3_t {
  std::uint8_t bits;
};
struct e5m2_t {
  std::uint8_t bits;
};

float e4m3_to_float(std::uint8_t bits);  // exact
float e5m2_to_float(std::uint8_t bits);
// Round to nearest even, saturating at the largest finite value (as quantisers
// clamp: ±448 and ±57344, infinities included, where torch's casts give NaN
// for e4m3 and ±inf for e5m2); NaN stays NaN (0x7f).
std::uint8_t float_to_e4m3(float value);
std::uint8_t float_to_e5m2(float value);

// Every code's value, for the engines' loads (a table lookup, not a decode).
inline const std::array<float, 256> kE4m3Values = [] {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[std::size_t(c)] = e4m3_to_float(std::uint8_t(c));
  return t;
}();
inline const std::array<float, 256> kE5m2Values = [] {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[std::size_t(c)] = e5m2_to_float(std::uint8_t(c));
  return t;
}();

inline float to_float(float x) { return x; }
inline float to_float(f16_t x) { return f16_to_float(x.bits); }
inline float to_float(bf16_t x) { return bf16_to_float(x.bits); }
inline float to_float(e4m3_t x) { return kE4m3Values[x.bits]; }
inline float to_float(e5m2_t x) { return kE5m2Values[x.bits]; }

template <typename T>
T from_float(float x);
template <>
inline float from_float<float>(float x) { return x; }
template <>
inline f16_t from_float<f16_t>(float x) { return {float_to_f16(x)}; }
template <>
inline bf16_t from_float<bf16_t>(float x) { return {float_to_bf16(x)}; }
template <>
inline e4m3_t from_float<e4m3_t>(float x) { return {float_to_e4m3(x)}; }
template <>
inline e5m2_t from_float<e5m2_t>(float x) { return {float_to_e5m2(x)}; }

// Calls f(T{}) with T the host storage type of `dtype`, one of the dtypes of
// queries and outputs (fp16, bf16, fp32; throws for fp8): the one place a
// runtime dtype becomes a template argument on the host.
template <typename F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f16: return f(f16_t{});
    case DType::bf16: return f(bf16_t{});
    case DType::f32: break;
    case DType::e4m3:
    case DType::e5m2: throw_not_a_query_dtype(dtype);
  }
  return f(float{});
}

// The same over every KV cache dtype, fp8 included.
template <typename F>
decltype(auto) dispatch_kv_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::e4m3: return f(e4m3_t{});
    case DType::e5m2: return f(e5m2_t{});
    default: break;
  }
  return dispatch_dtype(dtype, std::forward<F>(f));
}

// Values stored as `dtype` (bytes, a whole number of elements; any dtype), widened to fp32 exactly.
std::vector<float> to_floats(std::span<const std::byte> data, DType dtype);

}  // namespace codec
