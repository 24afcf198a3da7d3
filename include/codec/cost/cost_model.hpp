#pragma once
// Cost model C(rows, kv_len): predicted time in microseconds of one partial
// attention task (rows query rows against kv_len keys of one kv head) on one
// of the m concurrently running blocks. The planner only compares costs, so
// what matters is the shape of C, not its absolute accuracy.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/core/heads.hpp"

namespace codec {

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual double cost_us(int rows, long kv_len) const = 0;
  // Predicted time of the merge that follows the partial attention, in
  // microseconds, when `rows` query rows merge up to `partials` partial states
  // each (partials ≥ 2); the rows with one partial, which the merge skips,
  // are not counted. Models that do not price it return 0 (prices_merge()
  // false), and the planner then weighs PAC tasks alone.
  virtual bool prices_merge() const { return false; }
  virtual double merge_us(std::int64_t /*rows*/, int /*partials*/) const { return 0; }
  // Predicted time of a task when only `busy` blocks run at once: each then
  // gets more than 1/m of the memory bandwidth, so a plan of fewer tasks
  // than blocks runs them faster than cost_us says. Models that do not
  // price it (prices_contention() false) return cost_us.
  virtual bool prices_contention() const { return false; }
  virtual double cost_busy_us(int rows, long kv_len, int /*busy*/) const { return cost_us(rows, kv_len); }
  // Predicted time of a wide task (PlannerOptions::wide_tile_rows: up to
  // twice the rows of a task, on a wide block that takes `span` blocks'
  // place, one SM: PlannerOptions::wide_span) of `rows` rows against kv_len
  // keys, with every SM busy. By default two tasks of half its rows at the
  // pace of span blocks: as much block time as those two tasks take; a model
  // that measured the wide kernel (prices_wide()) says better.
  virtual bool prices_wide() const { return false; }
  virtual double wide_cost_us(int rows, long kv_len, int span) const {
    return 2 * cost_us((rows + 1) / 2, kv_len) / span;
  }
  virtual std::string describe() const = 0;
};

// The H200's ceilings, measured once on the machine (docs/BENCHMARKS.md): a
// device-to-device copy counting bytes read and written, and a cuBLAS bf16
// GEMM; and its SM count. Every H200 figure of the library and its tools is
// one of these.
namespace h200 {
inline constexpr double kBandwidthGBps = 4200;
inline constexpr double kPeakTflops = 790;
inline constexpr int kSms = 132;
inline constexpr int kBlocksPerSm = 2;  // resident PAC blocks at head_dim ≥ 128 (cuda_pac_min_blocks_per_sm)
}  // namespace h200

// Analytic roofline: max(bytes / (bandwidth / m), flops / (peak / m)) + overhead,
// where m blocks share the device and a task moves its KV chunk, its query rows
// and its partial outputs.
struct RooflineParams {
  double bandwidth_gbps = h200::kBandwidthGBps;  // device memory GB/s, all blocks together
  double peak_tflops = h200::kPeakTflops;        // matrix TFLOP/s, all blocks together
  int concurrent_blocks = h200::kSms * h200::kBlocksPerSm;  // m: blocks sharing bandwidth and compute
  double task_overhead_us = 1.0;   // fixed cost of a task: scheduling, prologue, epilogue
  static RooflineParams h200();    // the H200's ceilings (namespace h200), 132 SMs × 2 blocks
  static RooflineParams cpu(int threads);  // a few-core host running the CPU engine
};

class RooflineCostModel final : public CostModel {
 public:
  // kv_dtype prices the KV bytes, q_dtype the query rows (default: the cache's
  // dtype, or bf16's two bytes under an fp8 cache, whose queries are 16-bit).
  RooflineCostModel(const RooflineParams& params, const HeadConfig& heads, DType kv_dtype,
                    std::optional<DType> q_dtype = std::nullopt);
  double cost_us(int rows, long kv_len) const override;
  // A wide task has span blocks' share of the bandwidth and of the tensor cores.
  bool prices_wide() const override { return true; }
  double wide_cost_us(int rows, long kv_len, int span) const override;
  std::string describe() const override;
  const RooflineParams& params() const { return params_; }

 private:
  RooflineParams params_;
  double kv_bytes_per_token_;   // K + V of one kv head
  double row_bytes_;            // one query row in, one fp32 partial (o, lse) out
  double flops_per_row_token_;  // QKᵀ and PV: 4 · head_dim
};

// Measured table over a grid of (rows, kv_len), bilinear between grid points,
// linear in kv_len beyond the last column, clamped in rows. File format (JSON):
//   {"device": "...", "head_dim": 128, "dtype": "bf16",
//    "rows": [1, 4, ...], "kv_len": [16, 64, ...], "us": [[...], ...]}
// with us[i][j] the time of a task of rows[i] rows and kv_len[j] keys.
// Optionally the merge's time (what it adds to the partial attention's), over
// a grid of (rows that merge, partials per row):
//    "merge_rows": [32, ...], "merge_partials": [2, 4, ...], "merge_us": [[...], ...]
// bilinear between grid points, flat below the grid, linear with a
// non-negative slope beyond it. Optionally the same task grid timed with
// fewer blocks running ("us" is with all `blocks` of them busy):
//    "blocks": 264, "busy_blocks": [8, 32, ...], "busy_us": [[[...], ...], ...]
// with busy_us[b] a grid like "us" at busy_blocks[b] blocks; linear in the
// busy count between those points and `blocks`, flat below the first, and
// never dearer than "us". Optionally the wide kernel's tasks
// (CostModel::wide_cost_us), over their own rows and the same kv_len:
//    "wide_rows": [72, 128, ...], "wide_us": [[...], ...]
// interpolated as "us" is.
struct CostTable {
  std::string device;
  int head_dim = 0;
  DType dtype = DType::bf16;
  std::vector<int> rows;       // strictly increasing, ≥ 1
  std::vector<long> kv_len;    // strictly increasing, ≥ 1
  std::vector<std::vector<double>> us;  // [rows.size()][kv_len.size()], in (0, 1e9] us (a bound that keeps
                                        // every extrapolated price finite)
  std::vector<std::int64_t> merge_rows;       // strictly increasing, ≥ 1; empty: the merge is not priced
  std::vector<int> merge_partials;            // strictly increasing, ≥ 2
  std::vector<std::vector<double>> merge_us;  // [merge_rows.size()][merge_partials.size()], in [0, 1e9]
  int blocks = 0;                             // the blocks busy in `us`; 0: contention is not priced
  std::vector<int> busy_blocks;               // strictly increasing, ≥ 1, < blocks
  std::vector<std::vector<std::vector<double>>> busy_us;  // [busy_blocks.size()] grids like us
  std::vector<int> wide_rows;                   // strictly increasing, ≥ 1; empty: wide tasks not measured
  std::vector<std::vector<double>> wide_us;     // [wide_rows.size()][kv_len.size()], like us

  void validate() const;
  static CostTable load(const std::string& path);  // throws naming the file and field
  static CostTable parse(const std::string& json_text, const std::string& source);
  void save(const std::string& path) const;
};

class TableCostModel final : public CostModel {
 public:
  explicit TableCostModel(CostTable table);
  double cost_us(int rows, long kv_len) const override;
  bool prices_merge() const override { return !table_.merge_rows.empty(); }
  double merge_us(std::int64_t rows, int partials) const override;
  bool prices_contention() const override { return !table_.busy_blocks.empty(); }
  double cost_busy_us(int rows, long kv_len, int busy) const override;
  bool prices_wide() const override { return !table_.wide_rows.empty(); }
  double wide_cost_us(int rows, long kv_len, int span) const override;
  std::string describe() const override;
  const CostTable& table() const { return table_; }

 private:
  CostTable table_;
};

}  // namespace codec
