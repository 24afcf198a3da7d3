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
        Expected{"mha", 32, 32, 128}, Expected{"mqa", 32, 1, 128}, Expected{"gemma2-9b", 16, 8, 256},
        Expected{"gpt-oss-20b", 64, 8, 64}, Expected{"gemma3-12b", 16, 8, 256}}) {
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
                                             "llama4-scout", "mha", "mqa", "gemma2-9b", "gpt-oss-20b",
                                             "gemma3-12b"}));
  for (const std::string& name : names) EXPECT_NO_THROW(model_heads(name)) << name;
}

TEST(Models, UnknownNameListsKnownOnes) {
  EXPECT_TRUE(throws_with([] { model_heads("gpt-5"); },
                          "unknown model 'gpt-5' (known: qwen3-4b, llama3.2-1b, mistral-7b, "
                          "llama4-scout, mha, mqa, gemma2-9b, gpt-oss-20b, gemma3-12b)"));
  EXPECT_TRUE(throws_with([] { model_heads("Qwen3-4B"); }, "unknown model 'Qwen3-4B'"));
}

// Over the ranks of a group every query head of the model is held exactly
// once, each rank's query heads read only kv heads it holds, and a kv head is
// held by tp / Hkv ranks when tp > Hkv, else by one.
TEST(TensorParallel, SlicesCoverEveryHeadOnceWithTheirKvHeads) {
  for (const HeadConfig model : {heads(32, 8, 128), heads(32, 1, 128), heads(40, 8, 128), heads(16, 16, 64),
                                 heads(28, 4, 128), heads(64, 8, 256, 0.1f)}) {
    for (int tp = 1; tp <= 16; ++tp) {
      if (model.num_qo_heads % tp != 0 || (model.num_kv_heads % tp != 0 && tp % model.num_kv_heads != 0)) continue;
      std::vector<int> qo_held(std::size_t(model.num_qo_heads), 0), kv_held(std::size_t(model.num_kv_heads), 0);
      for (int rank = 0; rank < tp; ++rank) {
        const HeadSlice s = tensor_parallel_slice(model, tp, rank);
        const std::string what = std::to_string(model.num_qo_heads) + "/" + std::to_string(model.num_kv_heads) +
                                 " tp " + std::to_string(tp) + " rank " + std::to_string(rank);
        EXPECT_NO_THROW(s.heads.validate()) << what;
        EXPECT_EQ(s.heads.head_dim, model.head_dim) << what;
        EXPECT_EQ(s.heads.scale(), model.scale()) << what;
        for (int h = 0; h < s.heads.num_qo_heads; ++h) {
          const int global = s.qo_begin + h;
          ++qo_held[std::size_t(global)];
          // the model's kv head of this query head is the rank's kv head of its local one
          EXPECT_EQ(global / model.group(), s.kv_begin + h / s.heads.group()) << what << " head " << h;
        }
        for (int k = 0; k < s.heads.num_kv_heads; ++k) ++kv_held[std::size_t(s.kv_begin + k)];
      }
      const int copies = tp > model.num_kv_heads ? tp / model.num_kv_heads : 1;
      for (const int n : qo_held) EXPECT_EQ(n, 1) << "tp " << tp;
      for (const int n : kv_held) EXPECT_EQ(n, copies) << "tp " << tp;
    }
  }
}

TEST(TensorParallel, RefusesGroupsThatDoNotSplitTheHeads) {
  EXPECT_TRUE(throws_with([] { tensor_parallel_slice(heads(32, 8, 128), 3, 0); },
                          "tensor-parallel size 3 does not divide num_qo_heads 32"));
  EXPECT_TRUE(throws_with([] { tensor_parallel_slice(heads(24, 6, 128), 4, 0); },
                          "tensor-parallel size 4 and num_kv_heads 6: neither divides the other"));
  EXPECT_TRUE(throws_with([] { tensor_parallel_slice(heads(32, 8, 128), 0, 0); },
                          "tensor-parallel size 0 must be >= 1"));
  EXPECT_TRUE(throws_with([] { tensor_parallel_slice(heads(32, 8, 128), 2, 2); }, "rank 2 is outside [0, 2)"));
  EXPECT_TRUE(throws_with([] { tensor_parallel_slice(heads(32, 8, 128), 2, -1); }, "rank -1 is outside [0, 2)"));
  EXPECT_TRUE(throws_with([] { tensor_parallel_slice(heads(30, 8, 128), 2, 0); },
                          "num_qo_heads 30 is not a multiple of num_kv_heads 8"));
}

}  // namespace
}  // namespace codec
