#include "codec/core/dtype.hpp"

#include "codec/core/error.hpp"

namespace codec {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    case DType::f32:
      return "fp32";
  }
  CODEC_FAIL("invalid DType value ", static_cast<int>(dtype));
}

DType parse_dtype(std::string_view name) {
  if (name == "fp16" || name == "f16" || name == "half" || name == "float16") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp32" || name == "f32" || name == "float32") return DType::f32;
  CODEC_FAIL("unsupported dtype '", clip(name), "' (expected fp16, bf16 or fp32)");
}

float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f)  // inf, or NaN with its payload kept in the top mantissa bits
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_f16(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: keep the sign and the top payload bits, force quiet
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u)  // ≥ 65520 = 65504 + half an ulp: the tie goes to the even inf
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  const std::uint32_t exponent = a >> 23;
  if (exponent < 113) {  // below 2^-14: f16 subnormal (or zero), mantissa = round(|x| · 2^24)
    if (exponent < 102) return sign;  // |x| < 2^-25 rounds to zero
    const std::uint32_t significand = 0x800000u | (a & 0x7fffffu);
    const std::uint32_t shift = 126 - exponent;  // 14..24
    std::uint32_t h = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;  // may carry into the smallest normal
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((exponent - 112) << 10) | ((a >> 13) & 0x3ffu);
  const std::uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
  return static_cast<std::uint16_t>(sign | h);
}

std::vector<float> to_floats(std::span<const std::byte> data, DType dtype) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<float> out(data.size() / sizeof(T));
    const T* p = reinterpret_cast<const T*>(data.data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_float(p[i]);
    return out;
  });
}

}  // namespace codec
