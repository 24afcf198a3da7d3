#include "workload/workload.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "codec/core/error.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

using test::throws_with;

// Every request's node, children of each node.
std::vector<std::vector<std::int32_t>> children_of(const Workload& w) {
  std::vector<std::vector<std::int32_t>> c(w.nodes.size());
  for (std::size_t i = 0; i < w.nodes.size(); ++i)
    if (w.nodes[i].parent >= 0) c[std::size_t(w.nodes[i].parent)].push_back(std::int32_t(i));
  return c;
}

int num_roots(const Workload& w) {
  return int(std::count_if(w.nodes.begin(), w.nodes.end(), [](const WorkloadNode& n) { return n.parent < 0; }));
}

void expect_uniform_requests(const Workload& w, std::size_t requests, std::int64_t tokens, std::int64_t unique) {
  ASSERT_EQ(w.requests.size(), requests) << w.name;
  for (int r = 0; r < int(requests); ++r) EXPECT_EQ(w.request_tokens(r), tokens) << w.name << " request " << r;
  EXPECT_EQ(w.unique_tokens(), unique) << w.name;
}

// ---------------------------------------------------------------- built-ins

TEST(Builtin, EveryNameParsesAndValidates) {
  const std::vector<std::string> names = builtin_workload_names();
  ASSERT_EQ(names.size(), 40u);
  EXPECT_EQ(names.front(), "seq:128");
  EXPECT_EQ(names.back(), "window:131072");
  const std::vector<std::string> heads = {"seq:128",  "batch:4", "depth:2", "ratio:0.05",   "shape:2", "long",
                                          "loogle:4", "fewshot", "flat:8",  "sysprompt:64", "dense:2", "verify:8",
                                          "window:4096"};
  std::size_t next = 0;
  for (const std::string& name : names) {
    if (next < heads.size() && name == heads[next]) ++next;
    EXPECT_TRUE(is_builtin_workload(name)) << name;
    Workload w;
    ASSERT_NO_THROW(w = builtin_workload(name)) << name;
    EXPECT_NO_THROW(w.validate()) << name;
    EXPECT_EQ(w.name, name);
    EXPECT_EQ(w.model, "qwen3-4b");
    EXPECT_EQ(w.heads.num_qo_heads, 32);
    EXPECT_EQ(w.heads.num_kv_heads, 8);
    EXPECT_EQ(w.heads.head_dim, 128);
    EXPECT_EQ(w.dtype, DType::bf16);
    EXPECT_EQ(w.page_size, 16);
    EXPECT_EQ(w.seed, 1u);
  }
  EXPECT_EQ(next, heads.size()) << "sweeps out of docs/BENCHMARKS.md order";
}

TEST(Builtin, Seq) {
  for (std::int64_t leaf : {128, 256, 512, 1024, 2048}) {
    const Workload w = builtin_workload("seq:" + std::to_string(leaf));
    ASSERT_EQ(w.nodes.size(), 15u);  // binary, 4 levels
    expect_uniform_requests(w, 8, 4096 + leaf, 4096 + 8 * leaf);
    for (std::size_t i = 1; i < 7; ++i) EXPECT_EQ(w.nodes[i].tokens, 0) << "middle node " << i;
  }
}

TEST(Builtin, Batch) {
  for (std::int64_t b : {4, 8, 16, 32, 64, 100}) {
    const Workload w = builtin_workload("batch:" + std::to_string(b));
    expect_uniform_requests(w, std::size_t(b), 122048, 120000 + b * 2048);
    EXPECT_EQ(num_roots(w), 1);
  }
}

TEST(Builtin, Depth) {
  for (int d = 2; d <= 6; ++d) {
    const Workload w = builtin_workload("depth:" + std::to_string(d));
    ASSERT_EQ(w.nodes.size(), std::size_t((1 << d) - 1));
    expect_uniform_requests(w, std::size_t(1) << (d - 1), 1024 * d, 1024 * ((1 << d) - 1));
  }
  expect_uniform_requests(builtin_workload("depth:1"), 1, 1024, 1024);
}

TEST(Builtin, RatioAchievesTheSharedFraction) {
  for (double r : {0.05, 0.1, 0.2, 0.5, 0.8, 0.33}) {
    std::ostringstream spec;
    spec << "ratio:" << r;
    const Workload w = builtin_workload(spec.str());
    ASSERT_EQ(w.requests.size(), 16u);
    for (int q = 0; q < 16; ++q) EXPECT_EQ(w.request_tokens(q), 120000) << spec.str();
    const double shared = double(w.nodes[0].tokens);
    // S is rounded to a whole token; d(S/U)/dS = (1 + 15 S/U) / U with U = S + 16 (N − S).
    const double unique = double(w.unique_tokens());
    EXPECT_NEAR(shared / unique, r, 0.5 * (1 + 15 * r) / unique) << spec.str();
  }
  EXPECT_EQ(builtin_workload("ratio:0.2").nodes[0].tokens, 96000);
  EXPECT_EQ(builtin_workload("ratio:0.2").unique_tokens(), 480000);
}

TEST(Builtin, Shape) {
  for (std::int64_t k : {2, 3, 4, 5}) {
    const Workload w = builtin_workload("shape:" + std::to_string(k));
    expect_uniform_requests(w, std::size_t(k * k), 3072, 1024 * (1 + k + k * k));
  }
  const Workload dt = builtin_workload("shape:DT");
  ASSERT_EQ(dt.nodes.size(), 3u);
  for (std::int32_t i = 0; i < 3; ++i) EXPECT_EQ(dt.nodes[std::size_t(i)].parent, i - 1);
  expect_uniform_requests(dt, 1, 3072, 3072);
}

TEST(Builtin, LongAndFewshot) {
  expect_uniform_requests(builtin_workload("long"), 32, 50128, 50000 + 32 * 128);
  const Workload few = builtin_workload("fewshot");
  expect_uniform_requests(few, 1024, 2176, 64 * 2048 + 1024 * 128);
  EXPECT_EQ(num_roots(few), 64);
}

TEST(Builtin, FlatSharesNothing) {
  for (std::int64_t b : {8, 64, 3}) {
    const Workload w = builtin_workload("flat:" + std::to_string(b));
    expect_uniform_requests(w, std::size_t(b), 4096, 4096 * b);
    EXPECT_EQ(num_roots(w), int(b));
  }
}

TEST(Builtin, LoogleShapeAndDeterminism) {
  for (int n : {4, 8, 16}) {
    const Workload w = builtin_workload("loogle:" + std::to_string(n));
    ASSERT_EQ(num_roots(w), n);
    const auto children = children_of(w);
    std::set<std::int32_t> request_nodes(w.requests.begin(), w.requests.end());
    EXPECT_EQ(request_nodes.size(), w.requests.size()) << "one request per question";
    for (std::size_t i = 0; i < w.nodes.size(); ++i) {
      if (w.nodes[i].parent >= 0) {
        EXPECT_TRUE(request_nodes.count(std::int32_t(i))) << w.nodes[i].id;
        EXPECT_GE(w.nodes[i].tokens, 30) << w.nodes[i].id;
        EXPECT_LE(w.nodes[i].tokens, 200 + 256) << w.nodes[i].id;
        continue;
      }
      EXPECT_GE(w.nodes[i].tokens, 10000) << w.nodes[i].id;
      EXPECT_LE(w.nodes[i].tokens, 40000) << w.nodes[i].id;
      EXPECT_GE(children[i].size(), 4u) << w.nodes[i].id;
      EXPECT_LE(children[i].size(), 19u) << w.nodes[i].id;
    }
    const Workload again = builtin_workload("loogle:" + std::to_string(n));
    ASSERT_EQ(again.nodes.size(), w.nodes.size());
    for (std::size_t i = 0; i < w.nodes.size(); ++i) EXPECT_EQ(again.nodes[i].tokens, w.nodes[i].tokens);
  }
  // Many documents: the mean length approaches 24k.
  const Workload many = builtin_workload("loogle:2000");
  double sum = 0;
  int docs = 0;
  for (const WorkloadNode& node : many.nodes)
    if (node.parent < 0) sum += double(node.tokens), ++docs;
  EXPECT_NEAR(sum / docs, 24000, 600);
}

TEST(Builtin, SyspromptSharesOnePromptWithShortTails) {
  for (std::int64_t b : {64, 256, 512, 3}) {
    const Workload w = builtin_workload("sysprompt:" + std::to_string(b));
    ASSERT_EQ(w.requests.size(), std::size_t(b));
    ASSERT_EQ(w.nodes.size(), std::size_t(b) + 1);
    EXPECT_EQ(num_roots(w), 1);
    EXPECT_EQ(w.nodes[0].tokens, 4096);
    std::int64_t lo = 1 << 30, hi = 0;
    for (std::size_t r = 0; r < w.requests.size(); ++r) {
      const WorkloadNode& tail = w.nodes[std::size_t(w.requests[r])];
      EXPECT_EQ(tail.parent, 0);
      lo = std::min(lo, tail.tokens), hi = std::max(hi, tail.tokens);
    }
    EXPECT_GE(lo, 1);
    EXPECT_LE(hi, 16);
    if (b >= 256) {
      EXPECT_TRUE(lo == 1 && hi == 16) << "tails should cover 1..16 at " << b << " requests";
    }
  }
  // the same seed, the same tails
  EXPECT_EQ(builtin_workload("sysprompt:64").unique_tokens(), builtin_workload("sysprompt:64").unique_tokens());
  EXPECT_NE(builtin_workload("sysprompt:64").unique_tokens(), 4096 + 64 * 16);
}

TEST(Builtin, VerifySharesOneLongPrompt) {
  const Workload w = builtin_workload("verify:8");
  expect_uniform_requests(w, 8, 32768 + 128, 32768 + 8 * 128);
  EXPECT_EQ(w.window_left, -1);
}

// A 128k-token document under a 4,096-key window, and the same batch with
// the document cut to 4,096 tokens; the window travels through JSON.
TEST(Builtin, WindowSharesALongDocumentUnderAWindow) {
  for (std::int64_t n : {4096, 131072}) {
    const Workload w = builtin_workload("window:" + std::to_string(n));
    ASSERT_EQ(w.nodes.size(), 33u);
    expect_uniform_requests(w, 32, n + 128, n + 32 * 128);
    EXPECT_EQ(w.window_left, 4095);
    EXPECT_EQ(workload_queries(w).view().window_left, 4095);
    const Workload back = parse_workload_json(workload_to_json(w), "window.json");
    EXPECT_EQ(back.window_left, 4095);
  }
  Workload capped = builtin_workload("long");
  capped.heads.logits_soft_cap = 50.f;
  capped.sinks = true;
  const Workload back = parse_workload_json(workload_to_json(capped), "capped.json");
  EXPECT_EQ(back.heads.logits_soft_cap, 50.f);
  EXPECT_TRUE(back.sinks);
  EXPECT_EQ(back.window_left, -1);
  EXPECT_EQ(materialize(capped.scaled(1.0 / 256)).sinks.size(), 32u);
  EXPECT_TRUE(materialize(builtin_workload("long").scaled(1.0 / 256)).sinks.empty());
  EXPECT_TRUE(throws_with([] { parse_workload_json(R"({"nodes": [{"id": "a", "tokens": 3}], "requests": [{"node": "a"}],
                                                       "window_left": -2})", "bad.json"); }, "window_left"));
  EXPECT_TRUE(throws_with([] { parse_workload_json(R"({"nodes": [{"id": "a", "tokens": 3}], "requests": [{"node": "a"}],
                                                       "sinks": 1})", "bad.json"); }, "sinks: expected true or false"));
}

TEST(Builtin, DenseDocumentsShareTheirWholeContext) {
  for (std::int64_t d : {1, 2, 4, 512}) {
    const Workload w = builtin_workload("dense:" + std::to_string(d));
    ASSERT_EQ(w.nodes.size(), std::size_t(d));
    ASSERT_EQ(w.requests.size(), 512u);
    EXPECT_EQ(num_roots(w), d);
    EXPECT_EQ(w.unique_tokens(), 32768);
    std::map<std::int32_t, std::int64_t> requests_of;  // document → its requests
    for (const std::int32_t node : w.requests) ++requests_of[node];
    ASSERT_EQ(requests_of.size(), std::size_t(d));
    for (const auto& [node, count] : requests_of) {
      EXPECT_EQ(count, 512 / d) << "document " << node;
      EXPECT_EQ(w.nodes[std::size_t(node)].tokens, 32768 / d);
    }
  }
}

TEST(Builtin, BareNamesTakeTheDefaultPoint) {
  const std::map<std::string, std::string> defaults = {{"seq", "seq:512"},     {"batch", "batch:64"},
                                                       {"depth", "depth:4"},   {"ratio", "ratio:0.2"},
                                                       {"shape", "shape:2"},   {"loogle", "loogle:8"},
                                                       {"flat", "flat:8"},     {"long", "long"},
                                                       {"fewshot", "fewshot"}, {"sysprompt", "sysprompt:512"},
                                                       {"dense", "dense:2"},   {"window", "window:131072"},
                                                       {"verify", "verify:8"}};
  for (const auto& [bare, full] : defaults) {
    const Workload a = builtin_workload(bare), b = builtin_workload(full);
    EXPECT_EQ(a.name, full);
    EXPECT_EQ(a.requests, b.requests) << bare;
    EXPECT_EQ(a.unique_tokens(), b.unique_tokens()) << bare;
  }
}

TEST(Builtin, BadSpecs) {
  EXPECT_TRUE(throws_with([] { builtin_workload("foo"); }, "unknown workload 'foo' (built-in: seq[:L], batch[:B]"));
  EXPECT_TRUE(throws_with([] { builtin_workload("batch:abc"); }, "workload 'batch': parameter 'abc' is not an integer"));
  EXPECT_TRUE(throws_with([] { builtin_workload("batch:0"); }, "parameter '0' is not an integer in [1, 65536]"));
  EXPECT_TRUE(throws_with([] { builtin_workload("batch:"); }, "parameter '' is not an integer"));
  EXPECT_TRUE(throws_with([] { builtin_workload("seq:12x"); }, "parameter '12x'"));
  EXPECT_TRUE(throws_with([] { builtin_workload("ratio:1.5"); }, "parameter '1.5' is not a number in [0, 1]"));
  EXPECT_TRUE(throws_with([] { builtin_workload("dense:3"); }, "workload 'dense': parameter '3' does not divide 512"));
  EXPECT_TRUE(throws_with([] { builtin_workload("dense:1024"); }, "parameter '1024' is not an integer in [1, 512]"));
  EXPECT_TRUE(throws_with([] { builtin_workload("depth:40"); }, "workload 'depth': parameter '40'"));
  EXPECT_TRUE(throws_with([] { builtin_workload("shape:DT2"); }, "parameter 'DT2' is not an integer in [1, 64] or DT"));
  EXPECT_TRUE(throws_with([] { builtin_workload("long:3"); }, "workload 'long' takes no parameter, got '3'"));
  EXPECT_TRUE(is_builtin_workload("batch:abc"));  // so that resolve reports the parameter
  EXPECT_FALSE(is_builtin_workload("foo.json"));
  EXPECT_FALSE(is_builtin_workload("batches"));
}

// ---------------------------------------------------------------- Workload

Workload small_tree() {
  Workload w;
  w.name = "small";
  w.nodes = {{"doc", -1, 20}, {"q0", 0, 5}, {"q1", 0, 7}, {"empty", -1, 0}};
  w.requests = {1, 2, 2, 0};
  return w;
}

TEST(Workload, TokenCounts) {
  const Workload w = small_tree();
  EXPECT_NO_THROW(w.validate());
  EXPECT_EQ(w.request_tokens(0), 25);
  EXPECT_EQ(w.request_tokens(1), 27);
  EXPECT_EQ(w.request_tokens(3), 20);
  EXPECT_EQ(w.unique_tokens(), 32);  // the unused empty root adds nothing
  EXPECT_TRUE(throws_with([&] { w.request_tokens(4); }, "request index 4 is outside [0, 4)"));
}

TEST(Workload, ValidateMessages) {
  auto with = [](auto edit) {
    Workload w = small_tree();
    edit(w);
    return [w] { w.validate(); };
  };
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.nodes[1].parent = 2; }),
                          "node 'q0' (index 1) has parent index 2; expected -1 (a root) or an index below 1"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.nodes[0].parent = 0; }), "has parent index 0"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.nodes[2].tokens = -3; }), "node 'q1' has tokens -3; expected >= 0"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.nodes[2].id = "q0"; }), "duplicate node id 'q0' at indices 1 and 2"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.requests.clear(); }), "workload 'small' has no requests"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.requests[1] = 9; }), "request 1 names node index 9, outside [0, 4)"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.requests.push_back(3); }), "request 4 (node 'empty') has no KV tokens"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.heads.num_qo_heads = 30; }),
                          "num_qo_heads 30 is not a multiple of num_kv_heads 8"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.heads.head_dim = 96; }), "unsupported head_dim 96"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.page_size = 0; }), "page_size 0 must be >= 1"));
  EXPECT_TRUE(throws_with(with([](Workload& w) { w.dtype = DType(7); }), "dtype value 7 is not a valid DType"));
}

TEST(Workload, Scaled) {
  const Workload w = builtin_workload("batch:8").scaled(0.01);
  EXPECT_EQ(w.nodes[0].tokens, 1200);
  EXPECT_EQ(w.nodes[1].tokens, 20);  // 20.48 rounds to nearest
  EXPECT_EQ(w.requests, builtin_workload("batch:8").requests);
  const Workload seq = builtin_workload("seq:128").scaled(0.001);
  EXPECT_EQ(seq.nodes[0].tokens, 4);   // 4.096
  EXPECT_EQ(seq.nodes[1].tokens, 0);   // empty stays empty
  EXPECT_EQ(seq.nodes[14].tokens, 1);  // 0.128 keeps one token
  Workload half = small_tree();
  half.nodes[1].tokens = 3;
  EXPECT_EQ(half.scaled(0.5).nodes[1].tokens, 2);  // 1.5 rounds half away from zero
  EXPECT_EQ(small_tree().scaled(2.0).unique_tokens(), 64);
  EXPECT_TRUE(throws_with([] { small_tree().scaled(0); }, "scale factor 0 must be finite and > 0"));
  EXPECT_TRUE(throws_with([] { small_tree().scaled(-2); }, "scale factor -2"));
  EXPECT_TRUE(throws_with([] { small_tree().scaled(std::nan("")); }, "scale factor nan"));
}

// ---------------------------------------------------------------- JSON

TEST(Json, GoodFile) {
  // Two roots, children before parents, a 0-token node, one node named by
  // several requests, a request on an interior node, a model by name.
  const std::string text = R"({
    "name": "doc-qa", "seed": 7, "model": "llama3.2-1b", "page_size": 3, "dtype": "fp16",
    "nodes": [
      {"id": "q1", "parent": "mid", "tokens": 57},
      {"id": "mid", "parent": "doc", "tokens": 0},
      {"id": "doc", "parent": null, "tokens": 4096},
      {"id": "q2", "parent": "doc", "tokens": 9},
      {"id": "sys", "tokens": 100},
      {"id": "s1", "parent": "sys", "tokens": 1}
    ],
    "requests": [{"node": "q1"}, {"node": "q1"}, {"node": "doc"}, {"node": "q2"}, {"node": "s1"}]
  })";
  const Workload w = parse_workload_json(text, "dir/doc-qa.json");
  EXPECT_EQ(w.name, "doc-qa");
  EXPECT_EQ(w.seed, 7u);
  EXPECT_EQ(w.model, "llama3.2-1b");
  EXPECT_EQ(w.heads.head_dim, 64);
  EXPECT_EQ(w.page_size, 3);
  EXPECT_EQ(w.dtype, DType::f16);
  ASSERT_EQ(w.nodes.size(), 6u);
  for (std::size_t i = 0; i < w.nodes.size(); ++i) EXPECT_LT(w.nodes[i].parent, std::int32_t(i)) << w.nodes[i].id;
  auto id_of = [&](std::int32_t i) { return w.nodes[std::size_t(i)].id; };
  ASSERT_EQ(w.requests.size(), 5u);
  EXPECT_EQ(id_of(w.requests[0]), "q1");
  EXPECT_EQ(id_of(w.requests[1]), "q1");
  EXPECT_EQ(id_of(w.requests[2]), "doc");
  EXPECT_EQ(id_of(w.requests[4]), "s1");
  EXPECT_EQ(id_of(w.nodes[std::size_t(w.requests[0])].parent), "mid");
  EXPECT_EQ(w.request_tokens(0), 4096 + 57);
  EXPECT_EQ(w.request_tokens(2), 4096);
  EXPECT_EQ(w.request_tokens(3), 4096 + 9);
  EXPECT_EQ(w.request_tokens(4), 101);
  EXPECT_EQ(w.unique_tokens(), 4096 + 57 + 9 + 100 + 1);
}

TEST(Json, DefaultsAndModelObject) {
  const Workload w = parse_workload_json(
      R"({"model": {"num_qo_heads": 40, "num_kv_heads": 8, "head_dim": 128, "sm_scale": 0.125},
          "nodes": [{"id": "a", "parent": null, "tokens": 5}], "requests": [{"node": "a"}]})",
      "/tmp/x/my-load.json");
  EXPECT_EQ(w.name, "my-load");  // the file stem
  EXPECT_EQ(w.seed, 1u);
  EXPECT_EQ(w.page_size, 16);
  EXPECT_EQ(w.dtype, DType::bf16);
  EXPECT_EQ(w.model, "custom");
  EXPECT_EQ(w.heads.num_qo_heads, 40);
  EXPECT_EQ(w.heads.group(), 5);
  EXPECT_FLOAT_EQ(w.heads.scale(), 0.125f);
  const Workload d = parse_workload_json(R"({"nodes": [{"id": "a", "tokens": 5}], "requests": [{"node": "a"}]})", "s");
  EXPECT_EQ(d.model, "qwen3-4b");
  EXPECT_EQ(d.heads.num_qo_heads, 32);
}

// Query tokens: a request's own last node grows past its first query
// token; one shared by another request, or with children, gets a private
// child instead; every request then has q_len - 1 more tokens.
TEST(Workload, WithQueriesGrowsEachRequestsOwnEnd) {
  Workload w;
  w.nodes = {{"doc", -1, 100}, {"q1", 0, 7}, {"q2", 0, 9}};
  w.requests = {1, 2, 2, 0};  // q1 alone, q2 twice, the document itself (it has children)
  const Workload q = w.with_queries(4);
  EXPECT_EQ(q.q_len, 4);
  EXPECT_EQ(q.nodes[1].tokens, 10);  // q1 grew
  EXPECT_EQ(q.nodes[2].tokens, 9);   // q2 is shared: its requests get children
  ASSERT_EQ(q.nodes.size(), 6u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(q.request_tokens(r), w.request_tokens(r) + 3) << "request " << r;
  EXPECT_EQ(q.nodes[std::size_t(q.requests[3])].parent, 0);
  const Workload t = w.with_queries(1, 4, 3);
  EXPECT_EQ(t.q_len, 12);
  EXPECT_EQ(t.request_tokens(0), w.request_tokens(0) + 11);
  const Batch b = materialize(t);
  EXPECT_EQ(b.num_queries(), 48);
  EXPECT_EQ(b.queries.mask, QueryMask::draft);
  EXPECT_EQ(b.queries.mask_bits.size(), 4u * 18);  // 144 bits a request
  EXPECT_TRUE(throws_with([&] { w.with_queries(0); }, "--q-len 0 must be >= 1"));
}

// A custom mask replaces causal on every query token: its bytes must fit the
// requests' [q_len, kv_len] matrices, and it takes no tree and no rescaling.
TEST(Workload, WithCustomMaskTakesTheRequestsMatrices) {
  Workload w;
  w.nodes = {{"doc", -1, 20}, {"q1", 0, 5}};
  w.requests = {1, 0};
  const Workload q = w.with_queries(2);  // kv 26 and 21: 52 and 42 bits, 7 and 6 bytes
  const Batch b = materialize(q.with_custom_mask(std::vector<std::uint8_t>(13, 0xa5)));
  EXPECT_EQ(b.queries.mask, QueryMask::custom);
  EXPECT_EQ(b.queries.qo_indptr, (std::vector<std::int32_t>{0, 2, 4}));
  EXPECT_EQ(b.queries.mask_bits, std::vector<std::uint8_t>(13, 0xa5));
  EXPECT_EQ(materialize(w.with_custom_mask(std::vector<std::uint8_t>(7, 1))).num_queries(), 2);  // one token each
  EXPECT_TRUE(throws_with([&] { q.with_custom_mask(std::vector<std::uint8_t>(12)); },
                          "custom mask of 12 bytes; the 2 requests' [q_len 2, kv_len] matrices take 13"));
  EXPECT_TRUE(throws_with([&] { w.with_queries(1, 2, 1).with_custom_mask({1}); },
                          "a custom mask and a draft tree (--tree): give one"));
  EXPECT_TRUE(throws_with([&] { q.with_custom_mask(std::vector<std::uint8_t>(13)).scaled(2); },
                          "a workload with a custom mask cannot be scaled"));
}

// One bad input per test row; each message names the source, the field and the value.
TEST(Json, BadInputs) {
  const std::string a = R"({"id": "a", "parent": null, "tokens": 4})";
  auto doc = [&](const std::string& nodes, const std::string& requests = R"([{"node": "a"}])",
                 const std::string& extra = "") {
    return "{" + extra + R"("nodes": [)" + nodes + R"(], "requests": )" + requests + "}";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {doc(a + R"(, {"id": "q1", "parent": "dox", "tokens": 5})"),
       "bad.json: nodes[1].parent: node 'q1' has unknown parent 'dox'"},
      {doc(a + R"(, {"id": "b", "parent": "c", "tokens": 1}, {"id": "c", "parent": "b", "tokens": 1})"),
       "bad.json: nodes: node 'b' is in a parent cycle"},
      {doc(a + R"(, {"id": "s", "parent": "s", "tokens": 1})"), "node 's' is in a parent cycle"},
      {doc(a + "," + a), "bad.json: nodes[1].id: duplicate node id 'a' (first at nodes[0])"},
      {doc(R"({"id": "a", "tokens": -5})"), "bad.json: nodes[0].tokens (node 'a'): value -5 must be >= 0"},
      {doc(a, "[]"), "bad.json: workload 'bad': workload 'bad' has no requests"},
      {doc(a, R"([{"node": "q9"}])"), "bad.json: requests[0].node: request 0 names unknown node 'q9'"},
      {doc(R"({"id": "a", "tokens": 0})"), "request 0 (node 'a') has no KV tokens"},
      {doc(a, R"([{"node": "a"}])", R"("model": {"num_qo_heads": 30, "num_kv_heads": 8, "head_dim": 128},)"),
       "bad.json: model: num_qo_heads 30 is not a multiple of num_kv_heads 8"},
      {doc(a, R"([{"node": "a"}])", R"("model": {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 96},)"),
       "bad.json: model: unsupported head_dim 96"},
      {doc(a, R"([{"node": "a"}])", R"("model": {"num_qo_heads": 32, "num_kv_heads": 8},)"),
       "bad.json: model: missing field 'head_dim'"},
      {doc(a, R"([{"node": "a"}])", R"("model": "gpt-9",)"), "bad.json: model: unknown model 'gpt-9'"},
      {doc(a, R"([{"node": "a"}])", R"("dtype": "int8",)"), "bad.json: dtype: unsupported dtype 'int8'"},
      {doc(a, R"([{"node": "a"}])", R"("page_size": 0,)"), "bad.json: page_size: value 0 is outside [1, "},
      {doc(a, R"([{"node": "a"}])", R"("page_size": 2.5,)"), "bad.json: page_size: expected an integer, got number 2.5"},
      {doc(a, R"([{"node": "a"}])", R"("seed": -1,)"), "bad.json: seed: expected an integer >= 0, got number -1"},
      {doc(a, R"([{"node": "a"}])", R"("page_sise": 8,)"), "bad.json: top level: unknown field 'page_sise'"},
      {doc(R"({"id": "a", "tokens": "12"})"), R"(bad.json: nodes[0].tokens (node 'a'): expected an integer, got string "12")"},
      {doc(R"({"id": 3, "tokens": 12})"), "bad.json: nodes[0].id: expected a string, got number 3"},
      {doc(R"({"id": "a"})"), "bad.json: nodes[0]: missing field 'tokens'"},
      {doc(a, R"([{"nod": "a"}])"), "bad.json: requests[0]: unknown field 'nod'"},
      {doc(a, R"({"node": "a"})"), "bad.json: requests: expected an array, got object"},
      {R"({"requests": []})", "bad.json: top level: missing field 'nodes'"},
      {doc(R"({"id": "a", "tokens": 2147483647}, {"id": "b", "tokens": 9223372036854775807})", R"([{"node": "a"}])"),
       "bad.json: workload 'bad': more than 2147483647 tokens over all nodes (node 'b' brings 9223372036854775807)"},
      {"[1, 2]", "bad.json: top level: expected an object, got array"},
      {R"({"nodes": [{"id": "a", "tok)", "bad.json: invalid JSON at byte 28: "},
      {"", "bad.json: invalid JSON at byte 1: "},
  };
  for (const auto& [text, needle] : cases) EXPECT_TRUE(throws_with([&] { parse_workload_json(text, "bad.json"); }, needle)) << text;
}

// A message quotes a bounded prefix of the offending value, however large;
// nesting past the reader's limit is refused while parsing (core/json_input.hpp).
TEST(Json, HugeAndDeepValuesAreQuotedBoundedly) {
  std::string many = "[0";
  for (int i = 1; i < 100000; ++i) many += ", " + std::to_string(i);
  many += "]";
  for (const std::string& text : {R"({"nodes": )" + many + R"(, "requests": []})",
                                  R"({"name": )" + many + R"(, "nodes": [], "requests": []})",
                                  R"({"nodes": [], "requests": [], "model": ")" + std::string(1000000, 'x') + R"("})",
                                  R"({"nodes": [], "requests": [], "dtype": ")" + std::string(1000000, 'x') + R"("})",
                                  R"({"nodes": [], "requests": [], ")" + std::string(1000000, 'x') + R"(": 1})",
                                  R"({"nodes": [{"id": ")" + std::string(1000000, 'x') + R"(", "tokens": -1}], "requests": []})",
                                  R"({"nodes": [{"id": "a", "parent": ")" + std::string(1000000, 'x') + R"(", "tokens": 1}], "requests": []})",
                                  R"({"nodes": [{"id": "a", "tokens": 1}], "requests": [{"node": ")" + std::string(1000000, 'x') + R"("}]})",
                                  R"({"name": ")" + std::string(1000000, 'x') + R"(", "nodes": [{"id": "a", "tokens": 1}], "requests": []})"}) {
    try {
      parse_workload_json(text, "bad.json");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 400u) << clip(e.what(), 400);
    }
  }
  std::string deep = R"({"nodes": [{"id": "a", "tokens": )";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_TRUE(throws_with([&] { parse_workload_json(deep, "deep.json"); }, "deep.json: arrays and objects nested 65"));
}

struct TempFile {
  std::filesystem::path path;
  TempFile(const std::string& name, const std::string& text)
      : path(std::filesystem::temp_directory_path() / (std::to_string(getpid()) + "-" + name)) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

TEST(Json, FilesAndResolve) {
  const TempFile file("tiny.json", R"({"nodes": [{"id": "a", "tokens": 5}], "requests": [{"node": "a"}]})");
  const Workload w = load_workload_file(file.path.string());
  EXPECT_EQ(w.name, file.path.stem().string());
  EXPECT_EQ(resolve_workload(file.path.string()).unique_tokens(), 5);
  EXPECT_EQ(resolve_workload("batch:4").requests.size(), 4u);
  EXPECT_TRUE(throws_with([] { load_workload_file("/nonexistent/w.json"); },
                          "cannot read workload file '/nonexistent/w.json': No such file"));
  EXPECT_TRUE(throws_with([] { resolve_workload("/nonexistent/w.json"); }, "'/nonexistent/w.json'"));
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_TRUE(throws_with([&] { load_workload_file(dir); }, "'" + dir + "': it is a directory"));
  EXPECT_TRUE(throws_with([] { resolve_workload("batch:x"); }, "parameter 'x'"));
  const TempFile bad("bad.json", R"({"nodes": [)");
  EXPECT_TRUE(throws_with([&] { load_workload_file(bad.path.string()); }, bad.path.string() + ": invalid JSON"));
}

// ---------------------------------------------------------------- materialize

template <typename T>
void expect_kv_is_synthetic(const Workload& w, const Batch& b) {
  const PageTable table = b.page_table();
  const PagedKV kv = b.kv();
  const T* k = static_cast<const T*>(kv.k);
  const T* v = static_cast<const T*>(kv.v);
  for (int r = 0; r < table.num_requests(); ++r) {
    const std::vector<std::int32_t> ids = request_token_ids(w, r);
    ASSERT_EQ(std::int64_t(ids.size()), table.request_tokens(r)) << "request " << r;
    for (std::int64_t t = 0; t < std::int64_t(ids.size()); ++t) {
      const std::int32_t page = table.indices[std::size_t(table.indptr[std::size_t(r)] + t / w.page_size)];
      for (int h = 0; h < kv.num_kv_heads; ++h) {
        const std::int64_t at = kv.offset(page, int(t % w.page_size), h);
        for (int d = 0; d < kv.head_dim; ++d) {
          const float ek = to_float(from_float<T>(synthetic_kv(w.seed, ids[std::size_t(t)], h, d, false)));
          const float ev = to_float(from_float<T>(synthetic_kv(w.seed, ids[std::size_t(t)], h, d, true)));
          if (to_float(k[at + d]) != ek || to_float(v[at + d]) != ev) {
            ADD_FAILURE() << w.name << " page_size " << w.page_size << ": request " << r << " token " << t
                          << " (id " << ids[std::size_t(t)] << ", page " << page << ") head " << h << " dim " << d
                          << ": K " << to_float(k[at + d]) << " V " << to_float(v[at + d]) << ", expected K " << ek
                          << " V " << ev;
            return;
          }
        }
      }
    }
  }
}

// Queries use the range they are drawn from, and every (request, head) row
// is its own: a generator that repeated a request's or a head's row would let
// an engine that confuses rows pass the checks against the reference.
template <typename T>
void expect_distinct_queries_in_range(const Batch& b) {
  const T* q = reinterpret_cast<const T*>(b.q.data());
  const std::size_t n = b.q.size() / sizeof(T);
  ASSERT_EQ(n, std::size_t(b.num_requests()) * std::size_t(b.heads.num_qo_heads) * std::size_t(b.heads.head_dim));
  float lo = 0, hi = 0;
  for (std::size_t i = 0; i < n; ++i) lo = std::min(lo, to_float(q[i])), hi = std::max(hi, to_float(q[i]));
  EXPECT_GE(lo, -3.f);
  EXPECT_LE(hi, 3.f);
  EXPECT_LT(lo, -2.5f);  // the full range is used, not [-1, 1)
  EXPECT_GT(hi, 2.5f);
  const std::size_t row_bytes = std::size_t(b.heads.head_dim) * sizeof(T), rows = b.q.size() / row_bytes;
  std::set<std::string> distinct;
  for (std::size_t r = 0; r < rows; ++r)
    distinct.emplace(reinterpret_cast<const char*>(b.q.data()) + r * row_bytes, row_bytes);
  EXPECT_EQ(distinct.size(), rows) << "query rows repeat";
}

void check_batch(const Workload& w, const Batch& b) {
  SCOPED_TRACE(w.name + " page_size " + std::to_string(w.page_size));
  ASSERT_NO_THROW(b.page_table().validate());
  ASSERT_NO_THROW(b.kv().validate());
  ASSERT_EQ(b.num_requests(), int(w.requests.size()));
  EXPECT_EQ(b.page_size, w.page_size);
  EXPECT_EQ(b.dtype, w.dtype);
  for (int r = 0; r < b.num_requests(); ++r) EXPECT_EQ(b.page_table().request_tokens(r), w.request_tokens(r)) << r;
  // The pool holds only pages that some request uses.
  std::set<std::int32_t> used(b.tables.indices.begin(), b.tables.indices.end());
  EXPECT_EQ(std::int64_t(used.size()), b.num_pages);
  EXPECT_GE(b.num_pages * w.page_size, w.unique_tokens());
  EXPECT_EQ(b.k.size(), std::size_t(b.num_pages * w.page_size * w.heads.num_kv_heads * w.heads.head_dim) *
                            dtype_size(w.dtype));
  dispatch_dtype(w.dtype, [&](auto tag) {
    expect_kv_is_synthetic<decltype(tag)>(w, b);
    expect_distinct_queries_in_range<decltype(tag)>(b);
  });
}

Workload small(const std::string& spec, double factor, int page_size, DType dtype = DType::bf16) {
  Workload w = builtin_workload(spec).scaled(factor);
  w.page_size = page_size;
  w.dtype = dtype;
  w.heads = model_heads("llama3.2-1b");  // D = 64 keeps the check fast
  return w;
}

TEST(Materialize, BatchSharesTheRootPages) {
  for (int ps : {1, 3, 16}) {
    const Workload w = small("batch:8", 0.001, ps);  // root 120 tokens, 8 × 2 own
    const Batch b = materialize(w);
    check_batch(w, b);
    const std::int64_t root = w.nodes[0].tokens, full = root / ps;
    const PageTable t = b.page_table();
    for (int r = 1; r < b.num_requests(); ++r)
      for (std::int64_t p = 0; p < full; ++p)
        EXPECT_EQ(t.indices[std::size_t(t.indptr[std::size_t(r)] + p)], t.indices[std::size_t(p)])
            << "page_size " << ps << " request " << r << " page " << p;
    // Whole root pages once, then each request's own pages (the root's partial page copied into each).
    const std::int64_t own = (w.request_tokens(0) + ps - 1) / ps - full;
    EXPECT_EQ(b.num_pages, full + 8 * own) << "page_size " << ps;
  }
}

TEST(Materialize, DivergingPartialPageIsCopied) {
  Workload w = small_tree();  // doc 20 tokens → q0 (5), q1 (7, two requests); doc alone
  w.heads = model_heads("llama3.2-1b");
  for (int ps : {1, 3, 16}) {
    w.page_size = ps;
    const Batch b = materialize(w);
    check_batch(w, b);
    const PageTable t = b.page_table();
    const std::int32_t* q0 = t.indices.data() + t.indptr[0];
    const std::int32_t* q1 = t.indices.data() + t.indptr[1];
    for (int p = 0; p < 20 / ps; ++p) EXPECT_EQ(q0[p], q1[p]) << "page_size " << ps << " shared page " << p;
    if (20 % ps == 0) continue;
    const int split = 20 / ps, slots = 20 % ps;
    ASSERT_NE(q0[split], q1[split]) << "page_size " << ps << ": the diverging page must be private";
    const PagedKV kv = b.kv();
    const std::size_t bytes = std::size_t(slots) * std::size_t(kv.stride_token) * dtype_size(kv.dtype);
    const auto* k = static_cast<const std::byte*>(kv.k);
    const std::size_t esize = dtype_size(kv.dtype);
    EXPECT_EQ(std::memcmp(k + std::size_t(kv.offset(q0[split], 0, 0)) * esize,
                          k + std::size_t(kv.offset(q1[split], 0, 0)) * esize, bytes),
              0)
        << "page_size " << ps << ": the copied slots differ";
  }
}

TEST(Materialize, ScenariosAndDtypes) {
  for (int ps : {1, 3, 16}) {
    for (const auto& [spec, factor] : std::vector<std::pair<std::string, double>>{
             {"seq:128", 0.01}, {"depth:3", 0.01}, {"shape:3", 0.01}, {"shape:DT", 0.01}, {"fewshot", 0.002},
             {"flat:8", 0.01}, {"loogle:4", 0.002}, {"ratio:0.5", 0.0005}})
      check_batch(small(spec, factor, ps), materialize(small(spec, factor, ps)));
  }
  for (DType dtype : {DType::f16, DType::f32}) {
    const Workload w = small("long", 0.005, 16, dtype);
    check_batch(w, materialize(w));
  }
  Workload qwen = builtin_workload("seq:128").scaled(0.01);  // the default model's 8 × 128 heads
  check_batch(qwen, materialize(qwen));
}

TEST(Materialize, TablesWithoutKv) {
  const Workload w = small("fewshot", 0.002, 3);
  const WorkloadTables t = workload_page_tables(w);
  const Batch b = materialize(w);
  EXPECT_GE(t.num_pages, b.num_pages);  // materialize keeps only the pages used
  EXPECT_EQ(t.page_size, 3);
  EXPECT_EQ(t.tables.indptr, b.tables.indptr);
  EXPECT_EQ(t.tables.indices, b.tables.indices);
  EXPECT_EQ(t.tables.last_page_len, b.tables.last_page_len);
  // Full scale costs no KV memory: 7,500 root pages plus 64 × 128 own pages.
  const WorkloadTables full = workload_page_tables(builtin_workload("batch:64"));
  ASSERT_NO_THROW(full.view().validate());
  EXPECT_EQ(std::set<std::int32_t>(full.tables.indices.begin(), full.tables.indices.end()).size(), 7500u + 64 * 128);
  EXPECT_EQ(full.view().request_tokens(63), 122048);
}

TEST(Materialize, FlatSharesNoPage) {
  const Workload w = small("flat:8", 0.01, 3);
  const Batch b = materialize(w);
  EXPECT_EQ(std::int64_t(b.tables.indices.size()), b.num_pages);
}

TEST(Materialize, Deterministic) {
  const Workload w = small("depth:3", 0.01, 3);
  const Batch a = materialize(w), b = materialize(w);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.v, b.v);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.tables.indices, b.tables.indices);
  Workload other = w;
  other.seed = 2;
  EXPECT_NE(materialize(other).k, a.k);
}

TEST(Materialize, RejectsInvalidWorkloads) {
  Workload w = small_tree();
  w.page_size = 0;
  EXPECT_TRUE(throws_with([&] { materialize(w); }, "page_size 0 must be >= 1"));
}


TEST(WorkloadJson, WritingAndReadingBackGivesTheSameWorkload) {
  Workload w = builtin_workload("depth:3");
  w.nodes[2].tokens = 0;  // a 0-token node
  w.requests.push_back(w.requests.front());  // a duplicated request
  w.requests.push_back(1);                   // one at an internal node
  for (const HeadConfig heads : {model_heads("qwen3-4b"), HeadConfig{21, 3, 256, 0.25f}}) {
    w.heads = heads;
    w.model = heads.num_qo_heads == 21 ? "custom" : "qwen3-4b";
    w.page_size = 7;
    w.dtype = DType::f16;
    w.seed = 12345678901ull;
    const Workload back = parse_workload_json(workload_to_json(w), "round trip");
    EXPECT_EQ(back.name, w.name);
    EXPECT_EQ(back.seed, w.seed);
    EXPECT_EQ(back.heads.num_qo_heads, w.heads.num_qo_heads);
    EXPECT_EQ(back.heads.num_kv_heads, w.heads.num_kv_heads);
    EXPECT_EQ(back.heads.head_dim, w.heads.head_dim);
    EXPECT_EQ(back.heads.sm_scale, w.heads.sm_scale);
    EXPECT_EQ(back.page_size, w.page_size);
    EXPECT_EQ(back.dtype, w.dtype);
    ASSERT_EQ(back.nodes.size(), w.nodes.size());
    for (std::size_t i = 0; i < w.nodes.size(); ++i) {
      EXPECT_EQ(back.nodes[i].id, w.nodes[i].id);
      EXPECT_EQ(back.nodes[i].parent, w.nodes[i].parent);
      EXPECT_EQ(back.nodes[i].tokens, w.nodes[i].tokens);
    }
    EXPECT_EQ(back.requests, w.requests);
  }
}

}  // namespace
}  // namespace codec
