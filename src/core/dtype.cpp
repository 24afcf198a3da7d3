#include "codec/core/dtype.hpp"

#include <cmath>
#include <limits>

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
    case DType::e4m3:
      return "fp8_e4m3";
    case DType::e5m2:
      return "fp8_e5m2";
  }
  CODEC_FAIL("invalid DType value ", static_cast<int>(dtype));
}

DType parse_dtype(std::string_view name) {
  if (name == "fp16" || name == "f16" || name == "half" || name == "float16") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp32" || name == "f32" || name == "float32") return DType::f32;
  if (name == "fp8_e4m3" || name == "float8_e4m3fn" || name == "e4m3" || name == "fp8") return DType::e4m3;
  if (name == "fp8_e5m2" || name == "float8_e5m2" || name == "e5m2") return DType::e5m2;
  CODEC_FAIL("unsupported dtype '", clip(name), "' (expected fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)");
}

void throw_not_a_query_dtype(DType dtype) {
  CODEC_FAIL(to_string(dtype), " is a KV cache dtype only: queries and outputs are fp16, bf16 or fp32");
}

namespace {

// An 8-bit float of `mantissa` bits and exponent bias `bias`, no infinities or
// NaN handled here: sign · 2^(e − bias) · 1.m, or subnormal 2^(1 − bias) · 0.m.
float fp8_value(std::uint8_t bits, int mantissa, int bias) {
  const int e = (bits & 0x7f) >> mantissa, m = bits & ((1 << mantissa) - 1);
  const float magnitude = e == 0 ? std::ldexp(float(m), 1 - bias - mantissa)
                                 : std::ldexp(float((1 << mantissa) | m), e - bias - mantissa);
  return bits & 0x80 ? -magnitude : magnitude;
}

// The nearest (ties to even) of the 8-bit floats [0, max_code] of `decode`
// to |value|, its sign added; above the largest, that largest.
std::uint8_t fp8_round(float value, std::uint8_t max_code, float (*decode)(std::uint8_t)) {
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0;
  const float a = std::fabs(value);
  std::uint8_t lo = 0, hi = max_code;  // the largest code whose value is <= a: codes increase with values
  if (a >= decode(max_code)) return sign | max_code;
  while (hi - lo > 1) {
    const auto mid = std::uint8_t((lo + hi) / 2);
    (decode(mid) <= a ? lo : hi) = mid;
  }
  const float below = decode(lo), above = decode(hi);
  const std::uint8_t code = a - below < above - a ? lo : a - below > above - a ? hi : (lo & 1 ? hi : lo);
  return sign | code;
}

}  // namespace

float e4m3_to_float(std::uint8_t bits) {
  if ((bits & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  return fp8_value(bits, 3, 7);
}

float e5m2_to_float(std::uint8_t bits) {
  if ((bits & 0x7c) == 0x7c) {  // exponent all ones: inf, or NaN
    if (bits & 0x03) return std::numeric_limits<float>::quiet_NaN();
    return bits & 0x80 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return fp8_value(bits, 2, 15);
}

std::uint8_t float_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  return fp8_round(value, 0x7e, e4m3_to_float);
}

std::uint8_t float_to_e5m2(float value) {
  if (std::isnan(value)) return 0x7f;
  return fp8_round(value, 0x7b, e5m2_to_float);
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
  return dispatch_kv_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<float> out(data.size() / sizeof(T));
    const T* p = reinterpret_cast<const T*>(data.data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_float(p[i]);
    return out;
  });
}

}  // namespace codec
