#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <memory>
#include "codec/cost/cost_model.hpp"
#include "codec/plan/planner.hpp"
#include "codec/forest/forest.hpp"
constexpr int kPageSize = 16;
const codec::HeadConfig kHeads{32, 8, 128};
struct BlockTableBatch { int rows = 0, cols = 0; std::vector<std::int32_t> blocks, lens; std::int64_t num_pages = 0; };
#include "lbt.inc"
using clk = std::chrono::steady_clock;
double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
int main() {
  BlockTableBatch b = loogle_block_table(8);
  auto table_cost = std::make_shared<codec::TableCostModel>(codec::CostTable::load("data/cost_tables/nvidia_h200_d128_bf16.json"));
  codec::PlannerOptions opt; opt.num_blocks = codec::RooflineParams::h200().concurrent_blocks; opt.max_tile_rows = 64;
  opt.capacity = codec::PlanCapacity::for_batches(b.rows, std::int64_t(b.rows) * b.cols, kHeads, opt.max_tile_rows, opt.num_blocks, 120000);
  codec::StepPlanner steps(kHeads, codec::DType::bf16, table_cost, opt);
  const codec::BlockTable table{b.blocks.data(), b.rows, b.cols, b.cols, b.lens.data(), false};
  std::vector<std::int32_t> lens = b.lens;
  std::vector<std::byte> staging(codec::Plan::packed_bytes(*opt.capacity));
  double t[5] = {0}; int n = 0; codec::PageTableArrays pages;
  for (int step = 0; step < 400; ++step) {
    for (std::size_t r = 0; r < lens.size(); ++r) b.lens[r] = lens[r] - 63 + step % 64;
    auto t0 = clk::now();
    codec::page_table_from_block_table(table, kPageSize, b.num_pages, pages);
    auto t1 = clk::now();
    const codec::PageTable view = pages.view(); view.validate();
    auto t2 = clk::now();
    const codec::Forest forest = codec::derive_forest(view);
    auto t3 = clk::now();
    const codec::PlanStats p = steps.plan_into(forest, staging);
    auto t4 = clk::now();
    (void)p;
    auto t5 = clk::now();
    if (step >= 50) { t[0] += us(t0,t1); t[1] += us(t1,t2); t[2] += us(t2,t3); t[3] += us(t3,t4); t[4] += us(t4,t5); ++n; }
  }
  std::printf("page_table %.1f  validate %.1f  derive %.1f  plan(reuse) %.1f  memcpy %.1f us  (plan %.2f MB, searches %d)\n",
              t[0]/n, t[1]/n, t[2]/n, t[3]/n, t[4]/n, staging.size()/1e6, int(steps.searches()));
}
