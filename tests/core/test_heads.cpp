#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/core/heads.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

using test::throws_with;

HeadConfig heads(int hq, int hkv, int d, float scale = 0.f) { return {hq, hkv, d, scale}; }

TEST(HeadConfig, ValidConfigs) {
  for (int d : {64, 128, 256}) EXPECT_NO_THROW(heads(32, 8, d).validate()) << d;
  EXPECT_NO_THROW(heads(1, 1, 128).validate());
  EXPECT_NO_THROW(heads(32, 8, 128, 0.125f).validate());
}

TEST(HeadConfig, GroupAndScale) {
  EXPECT_EQ(heads(32, 8, 128).group(), 4);
  EXPECT_EQ(heads(40, 8, 128).group(), 5);
  EXPECT_FLOAT_EQ(heads(32, 8, 128).scale(), 1.f / std::sqrt(128.f));
  EXPECT_FLOAT_EQ(heads(32, 8, 64).scale(), 0.125f);
  EXPECT_FLOAT_EQ(heads(32, 8, 128, 0.5f).scale(), 0.5f);
}

TEST(HeadConfig, Messages) {
  EXPECT_TRUE(throws_with([] { heads(0, 8, 128).validate(); }, "num_qo_heads 0 must be >= 1"));
  EXPECT_TRUE(throws_with([] { heads(32, 0, 128).validate(); }, "num_kv_heads 0 must be >= 1"));
  EXPECT_TRUE(throws_with([] { heads(32, -2, 128).validate(); }, "num_kv_heads -2 must be >= 1"));
  EXPECT_TRUE(throws_with([] { heads(30, 8, 128).validate(); },
                          "num_qo_heads 30 is not a multiple of num_kv_heads 8"));
  EXPECT_TRUE(throws_with([] { heads(8, 32, 128).validate(); },
                          "num_qo_heads 8 is not a multiple of num_kv_heads 32"));
  EXPECT_TRUE(throws_with([] { heads(32, 8, 96).validate(); },
                          "unsupported head_dim 96 (supported: 64, 128, 256)"));
  EXPECT_TRUE(throws_with([] { heads(32, 8, 0).validate(); }, "unsupported head_dim 0"));
  EXPECT_TRUE(
      throws_with([] { heads(32, 8, 128, -1.f).validate(); }, "sm_scale -1 must be finite"));
  EXPECT_TRUE(
      throws_with([] { heads(32, 8, 128, std::numeric_limits<float>::quiet_NaN()).validate(); },
                  "sm_scale nan must be finite"));
  EXPECT_TRUE(
      throws_with([] { heads(32, 8, 128, std::numeric_limits<float>::infinity()).validate(); },
                  "sm_scale inf must be finite"));
}

TEST(Models, BenchmarkShapes) {
  struct Expected {
    const char* name;
    int hq, hkv, d;
  };
  for (const Expected& e :
       {Expected{"qwen3-4b", 32, 8, 128}, Expected{"llama3.2-1b", 32, 8, 64},
        Expected{"mistral-7b", 32, 8, 128}, Expected{"llama4-scout", 40, 8, 128},
        Expected{"mha", 32, 32, 128}, Expected{"mqa", 32, 1, 128}, Expected{"gemma2-9b", 16, 8, 256}}) {
    const HeadConfig h = model_heads(e.name);
    EXPECT_EQ(h.num_qo_heads, e.hq) << e.name;
    EXPECT_EQ(h.num_kv_heads, e.hkv) << e.name;
    EXPECT_EQ(h.head_dim, e.d) << e.name;
    EXPECT_EQ(h.sm_scale, 0.f) << e.name;
    EXPECT_NO_THROW(h.validate()) << e.name;
  }
}

TEST(Models, NamesListIsNullTerminatedAndResolvable) {
  std::vector<std::string> names;
  for (const char* const* p = model_names(); *p; ++p) names.emplace_back(*p);
  EXPECT_EQ(names, (std::vector<std::string>{"qwen3-4b", "llama3.2-1b", "mistral-7b",
                                             "llama4-scout", "mha", "mqa", "gemma2-9b"}));
  for (const std::string& name : names) EXPECT_NO_THROW(model_heads(name)) << name;
}

TEST(Models, UnknownNameListsKnownOnes) {
  EXPECT_TRUE(throws_with([] { model_heads("gpt-5"); },
                          "unknown model 'gpt-5' (known: qwen3-4b, llama3.2-1b, mistral-7b, "
                          "llama4-scout, mha, mqa, gemma2-9b)"));
  EXPECT_TRUE(throws_with([] { model_heads("Qwen3-4B"); }, "unknown model 'Qwen3-4B'"));
}

}  // namespace
}  // namespace codec
