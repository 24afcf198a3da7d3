// codec profile: measures the PAC kernel on the current GPU over a grid of
// (query rows, KV length) and writes the cost table the planner reads.
#include <cstdio>
#include <cctype>
#include <filesystem>

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

}  // namespace

int run_profile(const WorkloadArgs& args, const std::string& out, int reps) {
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
  const int max_reqs = rows.back() / G;
  const long max_len = kKvLens[std::size(kKvLens) - 1];
  for (int i = 0; i < nodes; ++i) w.nodes.push_back({std::to_string(i), -1, max_len});
  for (int i = 0; i < nodes; ++i)
    for (int j = 0; j < max_reqs; ++j) w.requests.push_back(i);
  std::fprintf(stderr, "profile: %s, %d blocks, %d tasks per block, %d nodes of %ld tokens\n", device.name.c_str(),
               opt.num_blocks, kTasksPerBlock, nodes, max_len);
  const Batch batch = materialize(w);
  CudaBench bench(batch);

  CostTable table;
  table.device = device.name;
  table.head_dim = h.head_dim;
  table.dtype = w.dtype;
  table.rows = rows;
  table.kv_len.assign(std::begin(kKvLens), std::end(kKvLens));
  const RooflineCostModel cost(RooflineParams::h200(), h, w.dtype);  // all tasks are equal: any model will do
  const ForestManager::Tables& t = batch.tables;
  for (const int r : rows) {
    std::vector<double> line;
    for (const long n : kKvLens) {
      // The first r/G requests of every node, cut to their first n tokens.
      std::vector<std::int32_t> indptr{0}, indices, last;
      const std::int32_t pages = std::int32_t((n + w.page_size - 1) / w.page_size);
      for (int i = 0; i < nodes; ++i)
        for (int j = 0; j < r / G; ++j) {
          const std::int32_t* p = t.indices.data() + t.indptr[i * max_reqs + j];
          indices.insert(indices.end(), p, p + pages);
          indptr.push_back(std::int32_t(indices.size()));
          last.push_back(std::int32_t(n - std::int64_t(pages - 1) * w.page_size));
        }
      const PageTable table_view{indptr, indices, last, w.page_size, batch.num_pages};
      const Plan plan = make_plan(derive_forest(table_view), h, w.dtype, cost, opt);
      const double us = bench.time(plan, reps) * 1e3 / kTasksPerBlock;
      std::fprintf(stderr, "  rows %3d  kv_len %6ld  %9.3f us per task\n", r, n, us);
      line.push_back(us);
    }
    table.us.push_back(line);
  }
  const std::string path = out.empty() ? default_cost_table_path(device.name, h, w.dtype) : out;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  table.save(path);
  std::printf("%s\n", path.c_str());
  return 0;
}

}  // namespace codec::tools
