#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/core/error.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

using test::throws_with;

bool is_f16_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(std::uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }
float bits_to_float(std::uint32_t u) { return std::bit_cast<float>(u); }

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::f16, DType::bf16, DType::f32, DType::e4m3, DType::e5m2})
    EXPECT_EQ(parse_dtype(to_string(d)), d);
  EXPECT_EQ(to_string(DType::f16), "fp16");
  EXPECT_EQ(to_string(DType::bf16), "bf16");
  EXPECT_EQ(to_string(DType::f32), "fp32");
  EXPECT_EQ(to_string(DType::e4m3), "fp8_e4m3");
  EXPECT_EQ(to_string(DType::e5m2), "fp8_e5m2");
}

TEST(DType, ParseAliases) {
  for (const char* name : {"fp16", "f16", "half", "float16"})
    EXPECT_EQ(parse_dtype(name), DType::f16) << name;
  for (const char* name : {"bf16", "bfloat16"}) EXPECT_EQ(parse_dtype(name), DType::bf16) << name;
  for (const char* name : {"fp32", "f32", "float32"})
    EXPECT_EQ(parse_dtype(name), DType::f32) << name;
  for (const char* name : {"fp8_e4m3", "float8_e4m3fn", "e4m3", "fp8"}) EXPECT_EQ(parse_dtype(name), DType::e4m3);
  for (const char* name : {"fp8_e5m2", "float8_e5m2", "e5m2"}) EXPECT_EQ(parse_dtype(name), DType::e5m2);
}

TEST(DType, ParseRejectsUnknown) {
  EXPECT_TRUE(throws_with([] { parse_dtype("fp4"); },
                          "unsupported dtype 'fp4' (expected fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)"));
  EXPECT_TRUE(throws_with([] { parse_dtype(""); }, "unsupported dtype ''"));
  EXPECT_TRUE(
      throws_with([] { parse_dtype("FP16"); }, "unsupported dtype 'FP16'"));  // case matters
}

TEST(DType, Size) {
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::e5m2), 1u);
}

// fp8 is a cache dtype only: where q's or out's dtype goes it is refused by name.
TEST(DType, Fp8IsNoQueryDtype) {
  EXPECT_TRUE(throws_with([] { dispatch_dtype(DType::e4m3, [](auto) {}); },
                          "fp8_e4m3 is a KV cache dtype only: queries and outputs are fp16, bf16 or fp32"));
  EXPECT_EQ(dispatch_kv_dtype(DType::e5m2, [](auto tag) { return sizeof(tag); }), 1u);
}

TEST(Fp8, KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);                   // the largest
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));     // smallest normal
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));     // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0xc0), -2.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)) && std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(e5m2_to_float(0x3c), 1.0f);
  EXPECT_EQ(e5m2_to_float(0x7b), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(e5m2_to_float(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2_to_float(0xfc), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7d)));
}

// Every finite code round-trips, codes increase with their values, and every
// midpoint of neighbours rounds to the even one (one float ulp either side to
// the nearer); past the largest value the conversion saturates.
TEST(Fp8, RoundTripsAndRoundsToNearestEven) {
  struct Format {
    float (*decode)(std::uint8_t);
    std::uint8_t (*encode)(float);
    std::uint8_t max;
  };
  for (const Format f : {Format{e4m3_to_float, float_to_e4m3, 0x7e}, Format{e5m2_to_float, float_to_e5m2, 0x7b}}) {
    for (int c = 0; c <= f.max; ++c) {
      ASSERT_EQ(f.encode(f.decode(std::uint8_t(c))), c) << c;
      ASSERT_EQ(f.encode(f.decode(std::uint8_t(c | 0x80))), c == 0 ? 0x80 : c | 0x80) << c;
      if (c == f.max) break;
      const float lo = f.decode(std::uint8_t(c)), hi = f.decode(std::uint8_t(c + 1));
      ASSERT_LT(lo, hi) << c;
      const float mid = lo + (hi - lo) / 2;
      ASSERT_EQ(f.encode(mid), (c & 1) ? c + 1 : c) << c;
      ASSERT_EQ(f.encode(std::nextafter(mid, 0.f)), c) << c;
      ASSERT_EQ(f.encode(std::nextafter(mid, hi)), c + 1) << c;
    }
    ASSERT_EQ(f.encode(1e30f), f.max);
    ASSERT_EQ(f.encode(-std::numeric_limits<float>::infinity()), f.max | 0x80);
    ASSERT_TRUE(std::isnan(f.decode(f.encode(std::numeric_limits<float>::quiet_NaN()))));
  }
}

TEST(F16, KnownValues) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_float(0x0000), 0.0f);
  EXPECT_FALSE(std::signbit(f16_to_float(0x0000)));
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7c01)));  // signalling NaN stays NaN, not inf
}

// Every bit pattern survives f16 → float → f16; NaN stays NaN with its sign.
TEST(F16, ExhaustiveRoundTrip) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float f = f16_to_float(h);
    const std::uint16_t back = float_to_f16(f);
    if (is_f16_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(is_f16_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << std::hex << b;
    }
  }
}

// Decoding is exact, so consecutive finite positive patterns decode to strictly
// increasing values.
TEST(F16, DecodingIsStrictlyIncreasing) {
  for (std::uint16_t h = 0; h < 0x7c00; ++h) ASSERT_LT(f16_to_float(h), f16_to_float(h + 1)) << h;
}

// At the midpoint of every pair of neighbours (subnormals included) the tie goes
// to the even pattern; one float ulp either side goes to the nearer one.
TEST(F16, RoundsToNearestEvenAtEveryTie) {
  for (std::uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = f16_to_float(h), hi = f16_to_float(h + 1);
    const float mid = lo + (hi - lo) / 2;  // exact: 12 significant bits
    const std::uint16_t even = (h & 1u) ? h + 1 : h;
    ASSERT_EQ(float_to_f16(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_f16(std::nextafter(mid, 0.f)), h) << std::hex << h;
    ASSERT_EQ(float_to_f16(std::nextafter(mid, hi)), h + 1) << std::hex << h;
    ASSERT_EQ(float_to_f16(-mid), even | 0x8000u) << std::hex << h;
  }
}

TEST(F16, RoundingExamples) {
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, down to even
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, up to even
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // half the smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);             // 1.5 subnormal ulps → 2
  EXPECT_EQ(float_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // carries into the smallest normal
  EXPECT_EQ(float_to_f16(0.1f), 0x2e66);
}

TEST(F16, Overflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(std::nextafter(65520.0f, 0.f)), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // tie between 65504 and 2^16: even → inf
  EXPECT_EQ(float_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_f16(inf), 0x7c00);
  EXPECT_EQ(float_to_f16(-inf), 0xfc00);
}

TEST(F16, Underflow) {
  EXPECT_EQ(float_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(float_to_f16(-1e-10f), 0x8000);  // sign of zero kept
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
}

TEST(F16, NaNPreserved) {
  EXPECT_TRUE(is_f16_nan(float_to_f16(std::numeric_limits<float>::quiet_NaN())));
  // Payload only in the low float bits: truncation alone would give inf. A
  // signalling NaN comes out quiet (the mantissa's top bit set).
  EXPECT_TRUE(is_f16_nan(float_to_f16(bits_to_float(0x7f800001u))));
  EXPECT_EQ(float_to_f16(bits_to_float(0x7f800001u)) & 0x0200u, 0x0200u);
  const std::uint16_t negative = float_to_f16(bits_to_float(0xffc00000u));
  EXPECT_TRUE(is_f16_nan(negative));
  EXPECT_EQ(negative & 0x8000u, 0x8000u);
}

TEST(BF16, ExhaustiveRoundTrip) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const std::uint16_t back = float_to_bf16(bf16_to_float(h));
    if (is_bf16_nan(h)) {
      ASSERT_TRUE(is_bf16_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << std::hex << b;
    }
  }
}

TEST(BF16, RoundsToNearestEvenAtEveryTie) {
  for (std::uint16_t h = 0; h < 0x7f7f; ++h) {
    const float lo = bf16_to_float(h), hi = bf16_to_float(h + 1);
    const float mid = lo + (hi - lo) / 2;  // exact, and no overflow near the maximum
    const std::uint16_t even = (h & 1u) ? h + 1 : h;
    ASSERT_EQ(float_to_bf16(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_bf16(std::nextafter(mid, 0.f)), h) << std::hex << h;
    ASSERT_EQ(float_to_bf16(std::nextafter(mid, hi)), h + 1) << std::hex << h;
  }
}

TEST(BF16, RoundingOverflowAndNaN) {
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);        // tie, down to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);    // tie, up to even
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(float_to_bf16(bf16_to_float(0x7f7f)), 0x7f7f);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_to_float(0x7f800001u))));
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7f800001u)) & 0x0040u, 0x0040u);  // a signalling NaN comes out quiet
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_to_float(0x7fffffffu))));  // no carry into inf
}

TEST(DType, DispatchAndHelpers) {
  EXPECT_EQ(to_float(from_float<f16_t>(1.5f)), 1.5f);
  EXPECT_EQ(to_float(from_float<bf16_t>(-3.0f)), -3.0f);
  EXPECT_EQ(dispatch_dtype(DType::f16, [](auto x) { return sizeof(x); }), 2u);
  EXPECT_EQ(dispatch_dtype(DType::bf16, [](auto x) { return sizeof(x); }), 2u);
  EXPECT_EQ(dispatch_dtype(DType::f32, [](auto x) { return sizeof(x); }), 4u);
}

TEST(DType, ToFloatsWidensEveryElementExactly) {
  const std::vector<bf16_t> b = {from_float<bf16_t>(1.5f), from_float<bf16_t>(-2.25f), {0x7f80}};
  const std::vector<float> wb = to_floats(std::as_bytes(std::span(b)), DType::bf16);
  ASSERT_EQ(wb.size(), 3u);
  EXPECT_EQ(wb[0], 1.5f);
  EXPECT_EQ(wb[1], -2.25f);
  EXPECT_TRUE(std::isinf(wb[2]));
  const std::vector<f16_t> h = {from_float<f16_t>(0.1f)};
  EXPECT_EQ(to_floats(std::as_bytes(std::span(h)), DType::f16), std::vector<float>{f16_to_float(h[0].bits)});
  const std::vector<float> f = {3.f, -0.f};
  EXPECT_EQ(to_floats(std::as_bytes(std::span(f)), DType::f32), f);
}

}  // namespace
}  // namespace codec
