#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "codec/core/error.hpp"
#include "codec/cost/cost_model.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

using test::throws_with;

// Round numbers: per block 100 GB/s = 1e5 B/us and 10 TFLOP/s = 1e7 FLOP/us.
RooflineParams simple_params(double overhead_us = 1.0) {
  RooflineParams p;
  p.bandwidth_gbps = 1000;
  p.peak_tflops = 100;
  p.concurrent_blocks = 10;
  p.task_overhead_us = overhead_us;
  return p;
}

// qwen3-4b heads in bf16: 2·128·2 = 512 B of KV per token; a row moves a
// 256 B query in and a 4·129 = 516 B fp32 partial out; 512 FLOP per row·token.
const HeadConfig kQwen{32, 8, 128, 0.f};
constexpr double kKvBytes = 512, kRowBytes = 772, kFlops = 512;

TEST(Roofline, MemoryBoundWorkedExample) {
  const RooflineCostModel model(simple_params(), kQwen, DType::bf16);
  // 1 row × 1000 keys: 512,772 B → 5.12772 us; 512,000 FLOP → 0.0512 us.
  EXPECT_NEAR(model.cost_us(1, 1000), 5.12772 + 1.0, 1e-9);
}

TEST(Roofline, ComputeBoundWorkedExample) {
  const RooflineCostModel model(simple_params(), kQwen, DType::bf16);
  // 1000 rows × 1000 keys: 1,284,000 B → 12.84 us; 5.12e8 FLOP → 51.2 us.
  EXPECT_NEAR(model.cost_us(1000, 1000), 51.2 + 1.0, 1e-9);
}

TEST(Roofline, H200Regimes) {
  const RooflineParams p = RooflineParams::h200();
  EXPECT_EQ(p.bandwidth_gbps, 4200);
  EXPECT_EQ(p.peak_tflops, 790);
  EXPECT_EQ(p.concurrent_blocks, 264);
  EXPECT_GE(p.task_overhead_us, 1.0);
  EXPECT_LE(p.task_overhead_us, 2.0);
  const RooflineCostModel model(p, kQwen, DType::bf16);
  const double bytes_per_us = 4200e3 / 264, flops_per_us = 790e6 / 264;
  // A GQA-4 task over 1024 keys streams 527,376 B: about 33 us per block.
  EXPECT_NEAR(model.cost_us(4, 1024),
              (1024 * kKvBytes + 4 * kRowBytes) / bytes_per_us + p.task_overhead_us, 1e-9);
  // Ridge at 790 / 4.2 ≈ 188 FLOP/B, i.e. about 188 rows per shared KV token.
  const long n = 1 << 16;
  EXPECT_NEAR(model.cost_us(128, n),
              (n * kKvBytes + 128 * kRowBytes) / bytes_per_us + p.task_overhead_us, 1e-6);
  EXPECT_NEAR(model.cost_us(256, n), 256.0 * n * kFlops / flops_per_us + p.task_overhead_us, 1e-6);
}

TEST(Roofline, DtypeAndHeadDimScaleBytes) {
  const RooflineCostModel bf16(simple_params(0), kQwen, DType::bf16);
  const RooflineCostModel fp32(simple_params(0), kQwen, DType::f32);
  const RooflineCostModel d64(simple_params(0), HeadConfig{32, 8, 64, 0.f}, DType::bf16);
  // Memory-bound, KV-dominated: fp32 moves twice the KV bytes, head_dim 64 half.
  EXPECT_NEAR(fp32.cost_us(1, 100000) / bf16.cost_us(1, 100000), 2.0, 1e-3);
  EXPECT_NEAR(d64.cost_us(1, 100000) / bf16.cost_us(1, 100000), 0.5, 1e-3);
}

TEST(Roofline, OverheadIsAdditive) {
  const RooflineCostModel none(simple_params(0.0), kQwen, DType::bf16);
  const RooflineCostModel three(simple_params(3.0), kQwen, DType::bf16);
  for (long n : {0L, 1L, 100L, 100000L})
    for (int rows : {1, 4, 1000})
      EXPECT_NEAR(three.cost_us(rows, n) - none.cost_us(rows, n), 3.0, 1e-9);
  // An empty chunk still moves its rows and pays the overhead.
  EXPECT_NEAR(three.cost_us(1, 0), kRowBytes / 1e5 + 3.0, 1e-12);
}

TEST(Roofline, Monotone) {
  for (const RooflineParams& p :
       {RooflineParams::h200(), RooflineParams::cpu(2), simple_params()}) {
    const RooflineCostModel model(p, kQwen, DType::bf16);
    for (int rows = 1; rows <= 512; rows *= 2)
      for (long n = 0; n <= 1 << 17; n = n ? n * 2 : 1) {
        const double c = model.cost_us(rows, n);
        EXPECT_GT(c, 0);
        EXPECT_LE(c, model.cost_us(rows, n + 1)) << rows << ' ' << n;
        EXPECT_LE(c, model.cost_us(rows + 1, n)) << rows << ' ' << n;
      }
  }
}

TEST(Roofline, CpuParams) {
  const RooflineParams one = RooflineParams::cpu(1), four = RooflineParams::cpu(4);
  EXPECT_EQ(four.concurrent_blocks, 4);
  // Per-thread ceilings do not depend on the thread count.
  EXPECT_DOUBLE_EQ(four.bandwidth_gbps / 4, one.bandwidth_gbps);
  EXPECT_DOUBLE_EQ(four.peak_tflops / 4, one.peak_tflops);
  EXPECT_NEAR(RooflineCostModel(one, kQwen, DType::bf16).cost_us(4, 4096),
              RooflineCostModel(four, kQwen, DType::bf16).cost_us(4, 4096), 1e-9);
  EXPECT_TRUE(throws_with([] { RooflineParams::cpu(0); }, "threads 0 must be >= 1"));
}

TEST(Roofline, RejectsBadInput) {
  RooflineParams p = simple_params();
  p.bandwidth_gbps = 0;
  EXPECT_TRUE(throws_with([&] { RooflineCostModel(p, kQwen, DType::bf16); }, "bandwidth_gbps 0"));
  p = simple_params();
  p.concurrent_blocks = 0;
  EXPECT_TRUE(
      throws_with([&] { RooflineCostModel(p, kQwen, DType::bf16); }, "concurrent_blocks 0"));
  p = simple_params(-1);
  EXPECT_TRUE(
      throws_with([&] { RooflineCostModel(p, kQwen, DType::bf16); }, "task_overhead_us -1"));
  EXPECT_TRUE(throws_with(
      [] {
        RooflineCostModel(simple_params(), HeadConfig{32, 8, 96, 0.f}, DType::bf16);
      },
      "unsupported head_dim 96"));
  const RooflineCostModel model(simple_params(), kQwen, DType::bf16);
  EXPECT_TRUE(throws_with([&] { model.cost_us(0, 10); }, "rows 0 must be >= 1"));
  EXPECT_TRUE(throws_with([&] { model.cost_us(1, -1); }, "kv_len -1 must be >= 0"));
}

// An fp8 cache halves the KV bytes of a token but not the query rows: they
// stay 16-bit (or what q_dtype names), and a task moves them and its partials.
TEST(Roofline, Fp8CachesHalveTheKvBytesAlone) {
  const RooflineParams h = RooflineParams::h200();
  const std::string bf16 = RooflineCostModel(h, kQwen, DType::bf16).describe();
  const std::string fp8 = RooflineCostModel(h, kQwen, DType::e4m3).describe();
  EXPECT_NE(bf16.find("512 B KV/token, 772 B/row"), std::string::npos) << bf16;
  EXPECT_NE(fp8.find("256 B KV/token, 772 B/row"), std::string::npos) << fp8;
  const std::string f32_q = RooflineCostModel(h, kQwen, DType::e5m2, DType::f32).describe();
  EXPECT_NE(f32_q.find("256 B KV/token, 1028 B/row"), std::string::npos) << f32_q;
  // memory-bound: a task of many rows and few keys moves mostly rows
  EXPECT_NEAR(RooflineCostModel(h, kQwen, DType::e4m3).cost_us(64, 16),
              RooflineCostModel(h, kQwen, DType::bf16).cost_us(64, 16) - 16 * 256 / (h.bandwidth_gbps * 1e3 /
                                                                                      h.concurrent_blocks),
              1e-9);
}

TEST(Roofline, Describe) {
  const std::string d = RooflineCostModel(RooflineParams::h200(), kQwen, DType::bf16).describe();
  EXPECT_NE(d.find("roofline"), std::string::npos) << d;
  EXPECT_NE(d.find("4200 GB/s"), std::string::npos) << d;
  EXPECT_NE(d.find("264 blocks"), std::string::npos) << d;
  EXPECT_EQ(d.find('\n'), std::string::npos) << d;
}

// rows {2, 8, 32} × kv_len {100, 200, 400}; tail slopes 0.01, 0.02, 0.04 us/key.
CostTable sample_table() {
  CostTable t;
  t.device = "test";
  t.head_dim = 128;
  t.dtype = DType::bf16;
  t.rows = {2, 8, 32};
  t.kv_len = {100, 200, 400};
  t.us = {{2, 3, 5}, {3, 5, 9}, {6, 10, 18}};
  return t;
}

TEST(Table, ExactAtGridPoints) {
  const CostTable t = sample_table();
  const TableCostModel model(t);
  for (std::size_t i = 0; i < t.rows.size(); ++i)
    for (std::size_t j = 0; j < t.kv_len.size(); ++j)
      EXPECT_DOUBLE_EQ(model.cost_us(t.rows[i], t.kv_len[j]), t.us[i][j]) << i << ' ' << j;
}

TEST(Table, BilinearBetweenGridPoints) {
  const TableCostModel model(sample_table());
  EXPECT_DOUBLE_EQ(model.cost_us(2, 150), 2.5);    // along kv_len
  EXPECT_DOUBLE_EQ(model.cost_us(5, 100), 2.5);    // along rows
  EXPECT_DOUBLE_EQ(model.cost_us(5, 150), 3.25);   // (2.5 + 4) / 2
  EXPECT_DOUBLE_EQ(model.cost_us(20, 300), 10.5);  // (7 + 14) / 2
  EXPECT_DOUBLE_EQ(model.cost_us(14, 250), 0.75 * 6 + 0.25 * 12);
}

TEST(Table, ExtrapolatesBeyondLastColumn) {
  const TableCostModel model(sample_table());
  EXPECT_DOUBLE_EQ(model.cost_us(2, 600), 5 + 0.01 * 200);
  EXPECT_DOUBLE_EQ(model.cost_us(8, 600), 9 + 0.02 * 200);
  EXPECT_DOUBLE_EQ(model.cost_us(32, 1400), 18 + 0.04 * 1000);
  EXPECT_DOUBLE_EQ(model.cost_us(5, 600), (7 + 13) / 2.0);
}

TEST(Table, ClampsRowsAndShortKv) {
  const TableCostModel model(sample_table());
  EXPECT_DOUBLE_EQ(model.cost_us(1, 200), 3);    // rows below the grid
  EXPECT_DOUBLE_EQ(model.cost_us(64, 200), 10);  // rows above the grid
  EXPECT_DOUBLE_EQ(model.cost_us(1000, 400), 18);
  EXPECT_DOUBLE_EQ(model.cost_us(8, 50), 3);  // kv_len below the first column: first value
  EXPECT_DOUBLE_EQ(model.cost_us(8, 0), 3);
  EXPECT_DOUBLE_EQ(model.cost_us(20, 1), 4.5);
}

TEST(Table, TailSlopeNeverNegativeNorFlatterThanSmallerRows) {
  CostTable t = sample_table();
  t.rows = {2, 8};
  t.kv_len = {100, 200};
  t.us = {{1, 5}, {6, 5.5}};  // noisy: row 8 got cheaper with more keys at the end
  const TableCostModel model(t);
  // Row 2 tail 0.04 us/key; row 8 measured −0.005 but takes the running max 0.04.
  EXPECT_DOUBLE_EQ(model.cost_us(2, 1000), 5 + 0.04 * 800);
  EXPECT_DOUBLE_EQ(model.cost_us(8, 1000), 5.5 + 0.04 * 800);
  EXPECT_LE(model.cost_us(2, 1000), model.cost_us(8, 1000));

  t.us = {{1, 0.5}, {2, 1}};
  EXPECT_DOUBLE_EQ(TableCostModel(t).cost_us(2, 5000), 0.5);  // negative slope clamps to 0
}

TEST(Table, SingleColumnAndSingleRow) {
  CostTable t = sample_table();
  t.rows = {4};
  t.kv_len = {256};
  t.us = {{7}};
  const TableCostModel model(t);
  EXPECT_DOUBLE_EQ(model.cost_us(1, 1), 7);
  EXPECT_DOUBLE_EQ(model.cost_us(100, 100000), 7);
}

TEST(Table, MonotoneForMonotoneTable) {
  CostTable t = sample_table();
  t.rows = {1, 2, 4, 16, 64};
  t.kv_len = {16, 64, 256, 1024, 4096};
  // Non-decreasing along both axes, with a flatter tail for larger rows.
  t.us = {{1, 1.5, 3, 9, 33},
          {1.2, 1.8, 3.5, 10, 34},
          {1.3, 2.2, 4, 12, 35},
          {2, 3, 6, 16, 36},
          {4, 7, 15, 40, 60}};
  const TableCostModel model(t);
  for (int rows = 1; rows <= 80; ++rows)
    for (long n = 0; n <= 9000; n += 7) {
      const double c = model.cost_us(rows, n);
      ASSERT_LE(c, model.cost_us(rows, n + 7)) << rows << ' ' << n;
      ASSERT_LE(c, model.cost_us(rows + 1, n)) << rows << ' ' << n;
    }
}

TEST(Table, RejectsBadQueries) {
  const TableCostModel model(sample_table());
  EXPECT_TRUE(throws_with([&] { model.cost_us(0, 10); }, "rows 0 must be >= 1"));
  EXPECT_TRUE(throws_with([&] { model.cost_us(1, -5); }, "kv_len -5 must be >= 0"));
}

TEST(Table, Describe) {
  const std::string d = TableCostModel(sample_table()).describe();
  EXPECT_NE(d.find("table 'test'"), std::string::npos) << d;
  EXPECT_NE(d.find("bf16"), std::string::npos) << d;
  EXPECT_NE(d.find("rows 2..32"), std::string::npos) << d;
  EXPECT_NE(d.find("kv_len 100..400"), std::string::npos) << d;
  EXPECT_EQ(d.find('\n'), std::string::npos) << d;
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "codec_" + name; }

// t saved to a temporary file and loaded back.
CostTable round_trip(const CostTable& t, const char* name) {
  const std::string path = temp_path(name);
  t.save(path);
  const CostTable back = CostTable::load(path);
  std::remove(path.c_str());
  return back;
}

TEST(TableFile, SaveLoadRoundTrip) {
  CostTable t = sample_table();
  t.device = "NVIDIA H200 \"sxm\"";
  t.dtype = DType::f16;
  t.kv_len = {100, 200, 1L << 40};
  t.us[1][2] = 1.0 / 3.0;  // needs all 17 digits to survive
  t.us[1][1] = 0.25;
  t.us[1][0] = 1e-3;
  const CostTable back = round_trip(t, "round_trip.json");
  EXPECT_EQ(back.device, t.device);
  EXPECT_EQ(back.head_dim, t.head_dim);
  EXPECT_EQ(back.dtype, t.dtype);
  EXPECT_EQ(back.rows, t.rows);
  EXPECT_EQ(back.kv_len, t.kv_len);
  EXPECT_EQ(back.us, t.us);  // bit-exact
}

TEST(TableFile, SaveRejectsInvalidTable) {
  CostTable t = sample_table();
  t.us[0][0] = 0;
  EXPECT_TRUE(throws_with([&] { t.save(temp_path("never.json")); }, "us[0][0] = 0 must be in (0, 1e+09] us"));
}

TEST(TableFile, LoadNamesMissingFile) {
  EXPECT_TRUE(throws_with([] { CostTable::load("/nonexistent/t.json"); },
                          "cost table /nonexistent/t.json: cannot open file"));
}

TEST(TableFile, LoadNamesFileInErrors) {
  const std::string path = temp_path("bad.json");
  std::ofstream(path) << R"({"device": "x", "head_dim": 128, "dtype": "bf16",
                            "rows": [1], "kv_len": [16], "us": [[-1]]})";
  EXPECT_TRUE(throws_with([&] { CostTable::load(path); },
                          "cost table " + path + ": us[0][0] = -1 must be in (0, 1e+09] us"));
  std::remove(path.c_str());
}

TEST(TableFile, ParsesDocumentedFormat) {
  const CostTable t =
      CostTable::parse(R"({"device": "H200", "head_dim": 64, "dtype": "fp16", "group": 4,
      "command": "codec profile", "rows": [1, 4], "kv_len": [16, 64], "us": [[1, 2], [3, 4.5]]})",
                       "t.json");
  EXPECT_EQ(t.device, "H200");
  EXPECT_EQ(t.head_dim, 64);
  EXPECT_EQ(t.dtype, DType::f16);
  EXPECT_EQ(t.rows, (std::vector<int>{1, 4}));
  EXPECT_EQ(t.kv_len, (std::vector<long>{16, 64}));
  EXPECT_EQ(t.us, (std::vector<std::vector<double>>{{1, 2}, {3, 4.5}}));
}

// A valid document with one substring replaced.
std::string doc_with(const std::string& from, const std::string& to) {
  std::string doc = R"({"device": "H200", "head_dim": 128, "dtype": "bf16", "group": 4,
    "rows": [1, 4, 16], "kv_len": [16, 64, 256, 1024],
    "us": [[1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]]})";
  const auto at = doc.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return doc.replace(at, from.size(), to);
}

::testing::AssertionResult parse_fails(const std::string& doc, const std::string& needle) {
  return throws_with([&] { CostTable::parse(doc, "t.json"); }, needle);
}

TEST(TableFile, RejectsNonIncreasingGrid) {
  EXPECT_TRUE(parse_fails(doc_with("[1, 4, 16]", "[1, 4, 4]"),
                          "cost table t.json: rows[2] = 4 must be > rows[1] = 4"));
  EXPECT_TRUE(parse_fails(doc_with("[16, 64, 256, 1024]", "[16, 256, 64, 1024]"),
                          "cost table t.json: kv_len[2] = 64 must be > kv_len[1] = 256"));
  EXPECT_TRUE(parse_fails(doc_with("[1, 4, 16]", "[0, 4, 16]"),
                          "cost table t.json: rows[0] = 0 must be >= 1"));
  EXPECT_TRUE(
      parse_fails(doc_with("[16, 64, 256, 1024]", "[]"), "cost table t.json: kv_len is empty"));
}

TEST(TableFile, RejectsWrongShape) {
  EXPECT_TRUE(parse_fails(doc_with(", [3, 4, 5, 6]]", "]"),
                          "cost table t.json: us has 2 rows, expected 3"));
  EXPECT_TRUE(parse_fails(doc_with("[2, 3, 4, 5]", "[2, 3, 4]"),
                          "cost table t.json: us[1] has 3 values, expected 4"));
  EXPECT_TRUE(
      parse_fails(doc_with("[2, 3, 4, 5]", "5"), "cost table t.json: us[1] must be an array"));
}

TEST(TableFile, RejectsBadValues) {
  EXPECT_TRUE(parse_fails(doc_with("[2, 3, 4, 5]", "[2, 3, 4, -1]"),
                          "cost table t.json: us[1][3] = -1 must be in (0, 1e+09] us"));
  EXPECT_TRUE(parse_fails(doc_with("[2, 3, 4, 5]", "[2, 0, 4, 5]"),
                          "cost table t.json: us[1][1] = 0 must be in (0, 1e+09] us"));
  EXPECT_TRUE(parse_fails(doc_with("[2, 3, 4, 5]", "[2, null, 4, 5]"),
                          "cost table t.json: us[1][1] = null must be a number"));
  EXPECT_TRUE(parse_fails(doc_with("[1, 4, 16]", "[1, 4.5, 16]"),
                          "cost table t.json: rows[1] = 4.5 must be an integer"));
  EXPECT_TRUE(parse_fails(doc_with("[1, 4, 16]", "[1, 4, 4294967296]"),
                          "cost table t.json: rows[2] = 4294967296 is too large"));
  EXPECT_TRUE(parse_fails(doc_with("\"group\": 4", "\"group\": 0"),
                          "cost table t.json: group = 0 must be >= 1"));
}

// Messages quote a bounded prefix of a value; nesting past the reader's limit
// is refused while parsing (core/json_input.hpp).
TEST(TableFile, RejectsHugeAndDeepValuesBoundedly) {
  std::string many = "[[0";
  for (int i = 1; i < 100000; ++i) many += ", " + std::to_string(i);
  many += "]]";
  try {
    CostTable::parse(doc_with("\"H200\"", many), "t.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("cost table t.json: device = [[0,1,2,")) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 200u) << e.what();
  }
  EXPECT_TRUE(parse_fails(doc_with("[1, 4, 16]", std::string(70, '[') + std::string(70, ']')),
                          "cost table t.json: arrays and objects nested 65 levels deep, past the limit of 64"));
}

TEST(TableFile, RejectsMissingField) {
  for (const char* field : {"device", "head_dim", "dtype", "rows", "kv_len"})
    EXPECT_TRUE(parse_fails(doc_with(std::string("\"") + field + "\"", "\"x_unused\""),
                            std::string("cost table t.json: missing field '") + field + "'"));
  EXPECT_TRUE(parse_fails(doc_with("\"us\"", "\"u\""), "cost table t.json: missing field 'us'"));
  EXPECT_TRUE(parse_fails("[1, 2]", "cost table t.json: expected a JSON object, got array"));
}

TEST(TableFile, RejectsTruncatedJson) {
  const std::string doc = doc_with("", "");
  EXPECT_TRUE(parse_fails(doc.substr(0, doc.size() - 5), "cost table t.json: invalid JSON"));
  EXPECT_TRUE(parse_fails(doc.substr(0, doc.size() - 5), "line 3, column"));  // position of the cut
  EXPECT_TRUE(parse_fails("", "cost table t.json: invalid JSON"));
}

TEST(TableFile, RejectsUnsupportedHeadDimAndDtype) {
  EXPECT_TRUE(
      parse_fails(doc_with("128", "96"),
                  "cost table t.json: head_dim = 96 is unsupported (supported: 64, 128, 256)"));
  EXPECT_TRUE(parse_fails(doc_with("\"bf16\"", "\"fp4\""),
                          "cost table t.json: dtype: unsupported dtype 'fp4'"));
  EXPECT_TRUE(
      parse_fails(doc_with("\"bf16\"", "16"), "cost table t.json: dtype = 16 must be a string"));
}

TEST(TableFile, ValidateAndConstructorReject) {
  CostTable t = sample_table();
  t.us[2][1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_with([&] { t.validate(); }, "cost table: us[2][1] = nan must be in (0, 1e+09] us"));
  EXPECT_TRUE(throws_with([&] { TableCostModel{t}; }, "us[2][1] = nan"));
  t = sample_table();
  t.us[0][2] = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(throws_with([&] { t.validate(); }, "us[0][2] = inf must be in (0, 1e+09] us"));
  EXPECT_TRUE(throws_with([] { TableCostModel{CostTable{}}; }, "head_dim = 0"));
}

// sample_table with a merge grid: rows {32, 256} × partials {2, 8}.
CostTable merge_table() {
  CostTable t = sample_table();
  t.merge_rows = {32, 256};
  t.merge_partials = {2, 8};
  t.merge_us = {{1, 4}, {2, 8}};
  return t;
}

TEST(Merge, ModelsWithoutAGridDoNotPriceIt) {
  const TableCostModel table(sample_table());
  EXPECT_FALSE(table.prices_merge());
  EXPECT_EQ(table.merge_us(1000, 16), 0);
  const RooflineCostModel roofline(simple_params(), kQwen, DType::bf16);
  EXPECT_FALSE(roofline.prices_merge());
  EXPECT_EQ(roofline.merge_us(1000, 16), 0);
}

TEST(Merge, BilinearFlatBelowAndLinearBeyond) {
  const TableCostModel model(merge_table());
  EXPECT_TRUE(model.prices_merge());
  EXPECT_DOUBLE_EQ(model.merge_us(32, 2), 1);
  EXPECT_DOUBLE_EQ(model.merge_us(256, 8), 8);
  EXPECT_DOUBLE_EQ(model.merge_us(32, 5), 2.5);     // along partials
  EXPECT_DOUBLE_EQ(model.merge_us(144, 2), 1.5);    // along rows
  EXPECT_DOUBLE_EQ(model.merge_us(144, 5), 3.75);   // (2.5 + 5) / 2
  EXPECT_DOUBLE_EQ(model.merge_us(1, 8), 4);        // fewer rows than measured: the first line
  EXPECT_DOUBLE_EQ(model.merge_us(32, 14), 4 + 3);  // beyond the partials: the last slope, 0.5 per partial
  EXPECT_DOUBLE_EQ(model.merge_us(480, 2), 3);      // beyond the rows: 1/224 us per row
  EXPECT_TRUE(throws_with([&] { model.merge_us(0, 4); }, "merge rows 0 must be >= 1"));
  EXPECT_TRUE(throws_with([&] { model.merge_us(32, 1); }, "merge partials 1 must be >= 2"));
  EXPECT_NE(model.describe().find("merge: rows 32..256 x partials 2..8"), std::string::npos) << model.describe();
}

TEST(Merge, NeverCheaperBeyondTheGridWhenTheLastStepFalls) {
  CostTable t = merge_table();
  t.merge_us = {{1, 4}, {5, 3}};  // falls along partials at 256 rows, and along rows at 8: noise in a measurement
  const TableCostModel model(t);
  EXPECT_DOUBLE_EQ(model.merge_us(256, 20), 3);  // no negative tail slope
  EXPECT_DOUBLE_EQ(model.merge_us(1000, 8), 3);  // nor in rows
}

TEST(Merge, SavesLoadsAndValidatesTheGrid) {
  const CostTable t = merge_table();
  const CostTable back = round_trip(t, "merge_round_trip.json");
  EXPECT_EQ(back.merge_rows, t.merge_rows);
  EXPECT_EQ(back.merge_partials, t.merge_partials);
  EXPECT_EQ(back.merge_us, t.merge_us);
  const std::string plain = temp_path("no_merge.json");
  sample_table().save(plain);
  std::ifstream in(plain);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(plain.c_str());
  EXPECT_EQ(text.find("merge"), std::string::npos);  // a table without the grid writes none of it
  EXPECT_TRUE(CostTable::parse(text, "t.json").merge_rows.empty());

  auto fails = [&](auto edit, const std::string& needle) {
    CostTable bad = merge_table();
    edit(bad);
    return throws_with([&] { bad.validate(); }, needle);
  };
  EXPECT_TRUE(fails([](CostTable& b) { b.merge_partials = {1, 8}; },
                    "merge_partials[0] = 1 must be >= 2 (a row with one partial does not merge)"));
  EXPECT_TRUE(fails([](CostTable& b) { b.merge_rows = {256, 32}; },
                    "merge_rows[1] = 32 must be > merge_rows[0] = 256 (strictly increasing)"));
  EXPECT_TRUE(fails([](CostTable& b) { b.merge_us[1] = {2}; }, "merge_us[1] has 1 values, expected 2"));
  EXPECT_TRUE(fails([](CostTable& b) { b.merge_us.pop_back(); }, "merge_us has 1 rows, expected 2"));
  EXPECT_TRUE(fails([](CostTable& b) { b.merge_us[0][1] = -0.5; }, "merge_us[0][1] = -0.5 must be in [0, 1e+09] us"));
  EXPECT_TRUE(fails([](CostTable& b) { b.merge_partials.clear(); },
                    "merge_rows, merge_partials and merge_us come together (2, 0 and 2 entries)"));
  EXPECT_TRUE(parse_fails(doc_with("\"us\"", "\"merge_rows\": [8], \"us\""),
                          "cost table t.json: missing field 'merge_partials'"));
}

// sample_table timed at 8 and 32 of 64 blocks busy: the grid at 8 is a
// third of `us`, at 32 a half.
CostTable busy_table() {
  CostTable t = sample_table();
  t.blocks = 64;
  t.busy_blocks = {8, 32};
  t.busy_us = {t.us, t.us};
  for (std::size_t i = 0; i < t.us.size(); ++i)
    for (std::size_t j = 0; j < t.us[i].size(); ++j) t.busy_us[0][i][j] /= 3, t.busy_us[1][i][j] /= 2;
  return t;
}

TEST(Contention, ModelsWithoutBusyGridsPriceEveryBlockBusy) {
  const TableCostModel table(sample_table());
  EXPECT_FALSE(table.prices_contention());
  EXPECT_DOUBLE_EQ(table.cost_busy_us(8, 150, 1), table.cost_us(8, 150));
  const RooflineCostModel roofline(RooflineParams::h200(), kQwen, DType::bf16);
  EXPECT_FALSE(roofline.prices_contention());
  EXPECT_DOUBLE_EQ(roofline.cost_busy_us(8, 150, 1), roofline.cost_us(8, 150));
}

TEST(Contention, LinearInTheBusyBlocksFlatBelowAndAllBusyFromBlocksOn) {
  const TableCostModel model(busy_table());
  EXPECT_TRUE(model.prices_contention());
  EXPECT_DOUBLE_EQ(model.cost_busy_us(8, 200, 8), 5.0 / 3);     // a grid point
  EXPECT_DOUBLE_EQ(model.cost_busy_us(8, 200, 32), 2.5);
  EXPECT_DOUBLE_EQ(model.cost_busy_us(8, 200, 20), (5.0 / 3 + 2.5) / 2);  // between the two grids
  EXPECT_DOUBLE_EQ(model.cost_busy_us(8, 200, 48), (2.5 + 5) / 2);        // between the last and `us`
  EXPECT_DOUBLE_EQ(model.cost_busy_us(8, 200, 1), 5.0 / 3);     // fewer than the first: flat
  EXPECT_DOUBLE_EQ(model.cost_busy_us(8, 200, 64), 5);          // every block: us
  EXPECT_DOUBLE_EQ(model.cost_busy_us(8, 200, 500), 5);         // more than the table's blocks: us
  EXPECT_DOUBLE_EQ(model.cost_busy_us(5, 150, 8), 3.25 / 3);    // bilinear within a grid, as cost_us
  EXPECT_DOUBLE_EQ(model.cost_busy_us(2, 600, 32), (5 + 0.01 * 200) / 2);  // its tail too
  CostTable noisy = busy_table();
  noisy.busy_us[1][1][1] = 100;  // at 32 blocks dearer than at 64
  EXPECT_DOUBLE_EQ(TableCostModel(noisy).cost_busy_us(8, 200, 32), 5);  // never dearer than with all busy
  EXPECT_TRUE(throws_with([&] { model.cost_busy_us(8, 200, 0); }, "busy blocks 0 must be >= 1"));
  EXPECT_TRUE(throws_with([&] { model.cost_busy_us(0, 200, 8); }, "rows 0 must be >= 1"));
  EXPECT_NE(model.describe().find("busy blocks 8 32 of 64"), std::string::npos) << model.describe();
}

TEST(Contention, SavesLoadsAndValidatesTheBusyGrids) {
  const CostTable t = busy_table();
  const CostTable back = round_trip(t, "busy_round_trip.json");
  EXPECT_EQ(back.blocks, 64);
  EXPECT_EQ(back.busy_blocks, t.busy_blocks);
  EXPECT_EQ(back.busy_us, t.busy_us);
  EXPECT_TRUE(round_trip(sample_table(), "no_busy.json").busy_blocks.empty());

  auto fails = [&](auto edit, const std::string& needle) {
    CostTable bad = busy_table();
    edit(bad);
    return throws_with([&] { bad.validate(); }, needle);
  };
  EXPECT_TRUE(fails([](CostTable& b) { b.blocks = 0; }, "blocks (0), busy_blocks and busy_us come together"));
  EXPECT_TRUE(fails([](CostTable& b) { b.busy_blocks = {8, 64}; }, "busy_blocks[1] = 64 must be in [1, blocks = 64)"));
  EXPECT_TRUE(fails([](CostTable& b) { b.busy_blocks = {0, 8}; }, "busy_blocks[0] = 0 must be in [1, blocks = 64)"));
  EXPECT_TRUE(fails([](CostTable& b) { b.busy_blocks = {32, 8}; },
                    "busy_blocks[1] = 8 must be > busy_blocks[0] = 32 (strictly increasing)"));
  EXPECT_TRUE(fails([](CostTable& b) { b.busy_us.pop_back(); }, "busy_us has 1 grids, expected 2"));
  EXPECT_TRUE(fails([](CostTable& b) { b.busy_us[1][2] = {1, 2}; }, "busy_us[1][2] has 2 values, expected 3"));
  EXPECT_TRUE(fails([](CostTable& b) { b.busy_us[0][1][0] = 0; },
                    "busy_us[0][1][0] = 0 must be in (0, 1e+09] us"));
  EXPECT_TRUE(fails([](CostTable& b) { b.busy_us[1][0][0] = 1.21e308; },
                    "busy_us[1][0][0] = 1.21e+308 must be in (0, 1e+09] us"));
  EXPECT_TRUE(parse_fails(doc_with("\"us\"", "\"busy_blocks\": [8], \"us\""), "cost table t.json: missing field 'blocks'"));
  EXPECT_TRUE(parse_fails(doc_with("\"us\"", "\"blocks\": 64, \"busy_blocks\": [8], \"busy_us\": [[1]], \"us\""),
                          "cost table t.json: busy_us[0][0] must be an array, got number"));
}

// Prices at the bound next to the smallest ones: every interpolation and
// extrapolation, at the far ends of every axis, stays finite and >= 0.
TEST(TableFile, PricesAtTheBoundStayFiniteEverywhere) {
  CostTable t = busy_table();
  t.merge_rows = {32, 256};
  t.merge_partials = {2, 8};
  t.merge_us = {{1e-9, 1e9}, {1e9, 1e-9}};
  for (auto* grid : {&t.us, &t.busy_us[0], &t.busy_us[1]})
    for (std::size_t i = 0; i < grid->size(); ++i)
      for (std::size_t j = 0; j < (*grid)[i].size(); ++j) (*grid)[i][j] = (i + j) % 2 ? 1e9 : 1e-9;
  const TableCostModel model(t);
  auto price = [](double us) { return std::isfinite(us) && us >= 0; };
  for (const int rows : {1, 5, 1 << 30})
    for (const long kv : {1L, 150L, 1L << 62})
      for (const int busy : {1, 20, 48, 64}) EXPECT_TRUE(price(model.cost_busy_us(rows, kv, busy))) << rows << kv;
  for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{1} << 62})
    EXPECT_TRUE(price(model.merge_us(rows, 1 << 30)));
  t.merge_us[1][0] = 2e9;
  EXPECT_TRUE(throws_with([&] { t.validate(); }, "merge_us[1][0] = 2e+09 must be in [0, 1e+09] us"));
}

// The tables `codec profile` measured and the repository ships: each must load,
// describe the head_dim and dtype its file name says (the tool picks tables by
// name), and grow with the KV length, as any real measurement of a streaming
// kernel does.
TEST(TableFile, CommittedTablesLoadAndMatchTheirNames) {
  const std::filesystem::path dir = std::filesystem::path(CODEC_SOURCE_DIR) / "data" / "cost_tables";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++seen;
    const std::string name = entry.path().stem().string();
    const CostTable t = CostTable::load(entry.path().string());
    EXPECT_NE(name.find("_d" + std::to_string(t.head_dim) + "_" + std::string(to_string(t.dtype))), std::string::npos)
        << name;
    for (std::size_t r = 0; r < t.rows.size(); ++r)
      for (std::size_t k = 1; k < t.kv_len.size(); ++k)
        EXPECT_LT(t.us[r][k - 1], t.us[r][k]) << name << " rows " << t.rows[r] << " kv_len " << t.kv_len[k];
  }
  EXPECT_GE(seen, 1) << "no cost table under " << dir;
}

}  // namespace
}  // namespace codec
