// codec profile: measures the PAC kernel on the current GPU over a grid of
// (query rows, KV length), with every block busy (and, with --busy-grid, with
// fewer), the wide kernel's tasks likewise where the device runs them, and the
// merge over a grid of (rows, partials per row), and writes the cost table the
// planner reads.
#include <cstdio>
#include <cctype>
#include <filesystem>
#include <numeric>

#include "codec/core/error.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "commands.hpp"
#include "cuda_bench.hpp"

namespace codec::tools {

namespace {

// Each block runs kTasksPerBlock equal tasks, so the launch is amortised the
// way it is in a real plan, where a block walks many tasks.
constexpr int kTasksPerBlock = 2;
const long kKvLens[] = {16, 64, 256, 1024, 4096, 16384};
// Rows of the wide tasks timed: a wide task's time hardly depends on them
// (both consumer warpgroups run whole 64-row tiles), but its epilogue does.
const int kWideRows[] = {80, 128};

// Busy blocks to time the task grid at besides all m: m/64 to m/2, rounded
// up to counts whose tasks fill whole nodes (a node gives one task per kv
// head). A plan of fewer tasks than blocks, a small tree's, runs with the
// other blocks idle, and each task gets more of the bandwidth.
std::vector<int> busy_counts(int m, int kv_heads) {
  const int step = kv_heads / std::gcd(kv_heads, kTasksPerBlock);
  std::vector<int> counts;
  for (const int part : {64, 16, 4, 2})
    if (const int k = std::max(step, (m / part + step - 1) / step * step); k < m && (counts.empty() || k > counts.back()))
      counts.push_back(k);
  return counts;
}

// The merge grid: requests (each row of theirs merging p partials) and p.
const int kMergeRequests[] = {1, 8, 64, 512};
const int kMergePartials[] = {2, 4, 8, 16, 32};
constexpr long kMergeNodeTokens = 2048;  // 64 tokens a chunk at the most partials

// Page tables (into indptr, indices, lasts) of the first `take` requests of
// each of the first `nodes` nodes of a batch with `per_node` requests a node,
// each cut to its first `pages` pages, the last of them holding `last` tokens.
PageTable first_requests(const ForestManager::Tables& t, int nodes, int per_node, int take, std::int32_t pages,
                         std::int32_t last, int page_size, std::int64_t num_pages, std::vector<std::int32_t>& indptr,
                         std::vector<std::int32_t>& indices, std::vector<std::int32_t>& lasts) {
  indptr.assign(1, 0);
  indices.clear();
  lasts.clear();
  for (int i = 0; i < nodes; ++i)
    for (int j = 0; j < take; ++j) {
      const std::int32_t* p = t.indices.data() + t.indptr[i * per_node + j];
      indices.insert(indices.end(), p, p + pages);
      indptr.push_back(std::int32_t(indices.size()));
      lasts.push_back(last);
    }
  return PageTable{indptr, indices, lasts, page_size, num_pages};
}

// What the merge adds to the partial attention when each of n requests' rows
// merges p partials: every request has a node of its own, cut into p equal
// chunks (SplitPolicy::fixed), and the run is timed whole and PAC alone.
void profile_merge(const Workload& base, const CostModel& cost, int reps, CostTable& table) {
  Workload w = base;
  w.name = "profile-merge";
  w.nodes.clear();
  w.requests.clear();
  const int most = kMergeRequests[std::size(kMergeRequests) - 1];
  for (int i = 0; i < most; ++i) w.nodes.push_back({std::to_string(i), -1, kMergeNodeTokens});
  for (int i = 0; i < most; ++i) w.requests.push_back(i);
  const Batch batch = materialize(w);
  CudaBench bench(batch, L2Flush::read);  // as `codec bench` times plans by default
  PlannerOptions opt = cuda_planner_options(w.heads, w.dtype);
  opt.split = SplitPolicy::fixed;
  const std::int32_t pages = std::int32_t((kMergeNodeTokens + w.page_size - 1) / w.page_size);
  const std::int32_t last = std::int32_t(kMergeNodeTokens - std::int64_t(pages - 1) * w.page_size);
  std::vector<std::int32_t> indptr, indices, lasts;
  table.merge_partials.assign(std::begin(kMergePartials), std::end(kMergePartials));
  for (const int n : kMergeRequests) {
    // the first n nodes, of one request each
    const Forest forest = derive_forest(first_requests(batch.tables, n, 1, 1, pages, last, w.page_size,
                                                       batch.num_pages, indptr, indices, lasts));
    std::vector<double> line;
    for (const int p : kMergePartials) {
      opt.fixed_splits = p;
      const Plan plan = make_plan(forest, w.heads, w.dtype, cost, opt);
      const double all = bench.time(plan, reps), pac = bench.time(plan, reps, CudaStages::partial_attention);
      line.push_back(std::max(0.0, (all - pac) * 1e3));  // a difference of medians: noise may make it negative
      std::fprintf(stderr, "  merge: rows %6lld  partials %3d  %8.3f us\n",
                   static_cast<long long>(n) * w.heads.num_qo_heads, p, line.back());
    }
    table.merge_rows.push_back(std::int64_t(n) * w.heads.num_qo_heads);
    table.merge_us.push_back(line);
  }
}

}  // namespace

int run_profile(const WorkloadArgs& args, const std::string& out, int reps, bool busy_grid) {
  CODEC_CHECK(cuda_device_count() > 0, "codec profile needs a CUDA device");
  Workload w;
  w.name = "profile";
  if (!args.model.empty()) w.model = args.model, w.heads = model_heads(args.model);
  if (!args.dtype.empty()) w.dtype = parse_dtype(args.dtype);
  if (args.page_size > 0) w.page_size = args.page_size;
  const HeadConfig& h = w.heads;
  const CudaDeviceInfo device = cuda_device_info(h, w.dtype);
  PlannerOptions opt = cuda_planner_options(h, w.dtype);
  opt.split = SplitPolicy::none;
  const int G = h.group();
  std::vector<int> rows;
  for (int r = G; r <= opt.max_tile_rows; r *= 2) rows.push_back(r);
  // One node per task: m / Hkv nodes fill the m blocks once with their Hkv heads.
  const int nodes = kTasksPerBlock * opt.num_blocks / h.num_kv_heads;
  const bool wide = opt.wide_tile_rows > 0;
  const int max_reqs = (wide ? std::max(rows.back(), kWideRows[std::size(kWideRows) - 1]) : rows.back()) / G;
  const long max_len = kKvLens[std::size(kKvLens) - 1];
  for (int i = 0; i < nodes; ++i) w.nodes.push_back({std::to_string(i), -1, max_len});
  for (int i = 0; i < nodes; ++i)
    for (int j = 0; j < max_reqs; ++j) w.requests.push_back(i);
  std::fprintf(stderr, "profile: %s, %d blocks, %d tasks per block, %d nodes of %ld tokens\n", device.name.c_str(),
               opt.num_blocks, kTasksPerBlock, nodes, max_len);
  const Batch batch = materialize(w);
  CudaBench bench(batch, L2Flush::read);  // as `codec bench` times plans by default

  CostTable table;
  table.device = device.name;
  table.head_dim = h.head_dim;
  table.dtype = w.dtype;
  table.rows = rows;
  table.kv_len.assign(std::begin(kKvLens), std::end(kKvLens));
  const RooflineCostModel cost(RooflineParams::h200(), h, w.dtype);  // all tasks are equal: any model will do
  const ForestManager::Tables& t = batch.tables;
  std::vector<std::int32_t> indptr, indices, lasts;
  // The task grid with `blocks` blocks busy, kTasksPerBlock tasks each (or,
  // for wide tasks, each wide block kTasksPerBlock of them).
  auto task_grid = [&](int blocks, const std::vector<int>& grid_rows) {
    PlannerOptions o = opt;
    o.num_blocks = blocks;
    const bool wide_grid = grid_rows.back() > o.max_tile_rows;
    if (!wide_grid) o.wide_tile_rows = 0;  // (a busy count need not be whole wide blocks)
    const int used = kTasksPerBlock * (wide_grid ? o.wide_blocks() : blocks) / h.num_kv_heads;  // nodes
    std::vector<std::vector<double>> grid;
    for (const int r : grid_rows) {
      std::vector<double> line;
      for (const long n : kKvLens) {
        // The first r/G requests of the first `used` nodes, cut to their first n tokens.
        const std::int32_t pages = std::int32_t((n + w.page_size - 1) / w.page_size);
        const std::int32_t last = std::int32_t(n - std::int64_t(pages - 1) * w.page_size);
        const PageTable view = first_requests(t, used, max_reqs, r / G, pages, last, w.page_size, batch.num_pages,
                                              indptr, indices, lasts);
        const Plan plan = make_plan(derive_forest(view), h, w.dtype, cost, o);
        const double us = bench.time(plan, reps) * 1e3 / kTasksPerBlock;
        std::fprintf(stderr, "  blocks %3d  rows %3d  kv_len %6ld  %9.3f us per task%s\n", blocks, r, n, us,
                     r > o.max_tile_rows ? " (wide)" : "");
        line.push_back(us);
      }
      grid.push_back(line);
    }
    return grid;
  };
  table.us = task_grid(opt.num_blocks, rows);
  if (wide) {
    table.wide_rows.assign(std::begin(kWideRows), std::end(kWideRows));
    table.wide_us = task_grid(opt.num_blocks, table.wide_rows);
  }
  if (busy_grid) {
    table.busy_blocks = busy_counts(opt.num_blocks, h.num_kv_heads);
    for (const int k : table.busy_blocks) table.busy_us.push_back(task_grid(k, rows));
    if (!table.busy_blocks.empty()) table.blocks = opt.num_blocks;  // the three fields come together
  }
  profile_merge(w, cost, reps, table);
  const std::string path = out.empty() ? default_cost_table_path(device.name, h, w.dtype) : out;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  table.save(path);
  std::printf("%s\n", path.c_str());
  return 0;
}

}  // namespace codec::tools
