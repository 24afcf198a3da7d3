#pragma once
// Storage dtypes and exact host-side conversions of 16-bit floats.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace codec {

enum class DType : std::uint8_t { f16, bf16, f32 };

std::string_view to_string(DType dtype);
DType parse_dtype(std::string_view name);  // "fp16"/"f16", "bf16", "fp32"/"f32"
inline std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

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

inline float to_float(float x) { return x; }
inline float to_float(f16_t x) { return f16_to_float(x.bits); }
inline float to_float(bf16_t x) { return bf16_to_float(x.bits); }

template <typename T>
T from_float(float x);
template <>
inline float from_float<float>(float x) { return x; }
template <>
inline f16_t from_float<f16_t>(float x) { return {float_to_f16(x)}; }
template <>
inline bf16_t from_float<bf16_t>(float x) { return {float_to_bf16(x)}; }

// Calls f(T{}) with T the host storage type of `dtype`: the one place a runtime
// dtype becomes a template argument on the host.
template <typename F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f16: return f(f16_t{});
    case DType::bf16: return f(bf16_t{});
    case DType::f32: break;
  }
  return f(float{});
}

// Values stored as `dtype` (bytes, a whole number of elements), widened to fp32 exactly.
std::vector<float> to_floats(std::span<const std::byte> data, DType dtype);

}  // namespace codec
