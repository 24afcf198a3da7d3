// The one planner setup (codec/engine/planner_setup.hpp): which cost model a
// target gets, where measured tables are found, what the workspace bounds,
// and the errors for shapes and workspaces it cannot serve.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/engine/planner_setup.hpp"
#include "codec/plan/queries.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

using test::throws_with;

AttentionShape qwen3_4b(DType dtype = DType::bf16) { return {32, 8, 128, 128, 0.f, dtype, dtype, 16}; }

PlannerSetupArgs args_for(PlanTarget target, AttentionShape shape = qwen3_4b()) {
  PlannerSetupArgs a;
  a.target = target;
  a.cpu_threads = 2;
  a.shape = shape;
  return a;
}

// A forest of `batch` requests sharing `shared` pages, each with one page of its own.
Forest shared_prefix(int batch, int shared, int page_size = 16) {
  std::vector<std::int32_t> indptr{0}, indices, last;
  for (int r = 0; r < batch; ++r) {
    for (int p = 0; p < shared; ++p) indices.push_back(p);
    indices.push_back(shared + r);
    indptr.push_back(std::int32_t(indices.size()));
    last.push_back(page_size);
  }
  return derive_forest({indptr, indices, last, page_size, shared + batch});
}

TEST(PlannerSetup, TableFileNamesAndTheirSearch) {
  EXPECT_EQ(cost_table_file_name("NVIDIA H200", 128, DType::bf16), "nvidia_h200_d128_bf16.json");
  EXPECT_EQ(cost_table_file_name("NVIDIA H100 80GB HBM3", 64, DType::f16), "nvidia_h100_80gb_hbm3_d64_fp16.json");
  // The source tree's tables are found without being asked for.
  EXPECT_EQ(std::filesystem::path(find_cost_table("NVIDIA H200", 128, DType::bf16)),
            std::filesystem::path(CODEC_SOURCE_DIR) / "data/cost_tables/nvidia_h200_d128_bf16.json");
  EXPECT_EQ(find_cost_table("NVIDIA B200", 128, DType::bf16), "");
  // A folder given comes first (the Python package's copy), then $CODEC_COST_TABLES.
  const auto dir = std::filesystem::temp_directory_path() / "codec_setup_tables";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(std::filesystem::path(CODEC_SOURCE_DIR) / "data/cost_tables/nvidia_h200_d128_bf16.json",
                             dir / "nvidia_b200_d128_bf16.json", std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(find_cost_table("NVIDIA B200", 128, DType::bf16, {dir.string()}), (dir / "nvidia_b200_d128_bf16.json").string());
  setenv("CODEC_COST_TABLES", dir.c_str(), 1);
  EXPECT_EQ(cost_table_dirs().front(), dir.string());
  EXPECT_EQ(find_cost_table("NVIDIA B200", 128, DType::bf16), (dir / "nvidia_b200_d128_bf16.json").string());
  unsetenv("CODEC_COST_TABLES");
  std::filesystem::remove_all(dir);
}

TEST(PlannerSetup, AnH200PlanUsesItsMeasuredTableAtItsOwnBlockCount) {
  const PlannerSetup s = make_planner_setup(args_for(PlanTarget::h200));
  EXPECT_EQ(s.device, "NVIDIA H200");
  EXPECT_EQ(std::filesystem::path(s.cost_table).filename(), "nvidia_h200_d128_bf16.json");
  EXPECT_NE(s.cost->describe().find("table"), std::string::npos) << s.cost->describe();
  EXPECT_EQ(s.options.num_blocks, h200::kSms * h200::kBlocksPerSm);
  EXPECT_GT(s.options.wide_tile_rows, 0);  // the wide kernel at head_dim 128
  EXPECT_EQ(s.alignment, 256u);
  // Another block count: the table was timed with every one of 264 busy, so the roofline.
  PlannerSetupArgs a = args_for(PlanTarget::h200);
  a.num_blocks = 101;
  const PlannerSetup other = make_planner_setup(a);
  EXPECT_EQ(other.cost_table, "");
  EXPECT_EQ(other.options.num_blocks, 101);
  EXPECT_EQ(other.options.wide_tile_rows, 0);  // 101 blocks are not whole wide blocks of 2
  a.num_blocks = 0;
  a.cost_table = "roofline";
  EXPECT_EQ(make_planner_setup(a).cost_table, "");
  // A table without a measured counterpart (fp16 at head_dim 256): the roofline.
  EXPECT_EQ(make_planner_setup(args_for(PlanTarget::h200, {16, 8, 256, 256, 0.f, DType::f16, DType::f16, 16})).cost_table, "");
}

TEST(PlannerSetup, TheCpuPlansWithTheRooflineUnlessGivenATable) {
  const PlannerSetup s = make_planner_setup(args_for(PlanTarget::cpu));
  EXPECT_EQ(s.device, "cpu");
  EXPECT_EQ(s.cost_table, "");
  EXPECT_EQ(s.options.num_blocks, 2);
  EXPECT_EQ(s.options.max_tile_rows, kCpuTileRows);
  EXPECT_EQ(s.alignment, 16u);
  PlannerSetupArgs a = args_for(PlanTarget::cpu);
  a.cost_table = std::string(CODEC_SOURCE_DIR) + "/data/cost_tables/nvidia_h200_d128_bf16.json";
  EXPECT_EQ(make_planner_setup(a).cost_table, a.cost_table);
  a.shape = qwen3_4b(DType::f16);
  EXPECT_TRUE(throws_with([&] { make_planner_setup(a); }, "was measured for head_dim 128 bf16, not head_dim 128 fp16"));
}

TEST(PlannerSetup, ShapesItCannotServeAreRefusedByName) {
  AttentionShape mla = qwen3_4b();
  mla.head_dim_vo = 64;
  EXPECT_TRUE(throws_with([&] { make_planner_setup(args_for(PlanTarget::cpu, mla)); },
                          "head_dim_vo 64 differs from head_dim_qk 128"));
  AttentionShape mixed = qwen3_4b();
  mixed.q_dtype = DType::f16;
  EXPECT_TRUE(throws_with([&] { make_planner_setup(args_for(PlanTarget::cpu, mixed)); },
                          "q dtype fp16 and KV dtype bf16 differ"));
  // an fp8 cache under 16-bit queries (on the CPU engine fp32 queries too); on CUDA with wide tasks as at 16 bits
  AttentionShape fp8 = qwen3_4b();
  fp8.kv_dtype = DType::e4m3;
  EXPECT_NO_THROW(make_planner_setup(args_for(PlanTarget::cpu, fp8)));
  EXPECT_EQ(make_planner_setup(args_for(PlanTarget::h200, fp8)).options.wide_tile_rows,
            make_planner_setup(args_for(PlanTarget::h200, qwen3_4b())).options.wide_tile_rows);
  EXPECT_GT(make_planner_setup(args_for(PlanTarget::h200, qwen3_4b())).options.wide_tile_rows, 0);
  fp8.q_dtype = DType::f32;
  EXPECT_TRUE(throws_with([&] { make_planner_setup(args_for(PlanTarget::h200, fp8)); },
                          "q dtype fp32 under a fp8_e4m3 cache: q is fp16 or bf16"));
  fp8.q_dtype = DType::e5m2;
  EXPECT_TRUE(throws_with([&] { make_planner_setup(args_for(PlanTarget::cpu, fp8)); },
                          "q dtype fp8_e5m2 under a fp8_e4m3 cache: q is fp16 or bf16 (or fp32)"));
  EXPECT_TRUE(throws_with([&] { make_planner_setup(args_for(PlanTarget::h200, qwen3_4b(DType::f32))); },
                          "the CUDA engine takes float16 or bfloat16, not float32"));
  AttentionShape bad = qwen3_4b();
  bad.page_size = 0;
  EXPECT_TRUE(throws_with([&] { make_planner_setup(args_for(PlanTarget::cpu, bad)); }, "page_size 0 must be >= 1"));
  bad = qwen3_4b();
  bad.head_dim_qk = bad.head_dim_vo = 96;
  EXPECT_TRUE(throws_with([&] { make_planner_setup(args_for(PlanTarget::cpu, bad)); }, "unsupported head_dim 96"));
  PlannerSetupArgs graph = args_for(PlanTarget::cpu);
  graph.workspace = {1 << 20, 8, 64};
  EXPECT_TRUE(throws_with([&] { make_planner_setup(graph); }, "a fixed capacity (CUDA graphs: max_batch_size 8) needs the CUDA engine"));
}

// A bounded CPU workspace: a batch gets the slots it holds, or an error
// naming the bytes the batch needs; unbounded, each plan gets what it needs.
TEST(PlannerSetup, TheWorkspaceBoundsEachBatchsSlots) {
  const Forest forest = shared_prefix(8, 4);
  const std::int64_t entries = 8 * 5;
  PlannerSetupArgs a = args_for(PlanTarget::cpu);
  EXPECT_EQ(make_planner_setup(a).options_for(forest, entries).max_slots, 0);
  a.workspace.bytes = 1 << 20;
  const PlannerSetup s = make_planner_setup(a);
  const PlannerOptions o = s.options_for(forest, entries);
  EXPECT_EQ(o.max_slots, cpu_workspace_slots(1 << 20, 128));
  const Plan plan = make_plan(forest, s.heads(), s.kv_dtype(), *s.cost, o);
  EXPECT_LE(plan.workspace().bytes, std::size_t(1) << 20);
  a.workspace.bytes = 512;
  EXPECT_TRUE(throws_with([&] { make_planner_setup(a).options_for(forest, entries); },
                          "workspace_buffer of 512 bytes is too small for this batch: it needs at least "));
}

// A sliding window's rows carry masks (per-row key intervals) with one token
// a request too: an H200 workspace sized for the batch holds them (graphs'
// capacities: tests/engine_cuda, which has the CUDA target).
TEST(PlannerSetup, WindowsCarryTheirMasksIntoTheWorkspace) {
  const Forest forest = shared_prefix(8, 40);
  const std::int64_t entries = 8 * 41;
  QueryBatch window;
  window.window_left = 20;
  PlannerSetupArgs a = args_for(PlanTarget::h200);
  a.workspace.bytes = std::size_t(4) << 20;
  const PlannerSetup s = make_planner_setup(a);
  const Plan plan = make_plan(forest, s.heads(), s.kv_dtype(), *s.cost, s.options_for(forest, entries, window), window);
  EXPECT_TRUE(plan.extent().windowed);
  EXPECT_LE(cuda_workspace_bytes(plan) + s.alignment, a.workspace.bytes);
}

// In a build without the CUDA engine its target says so, before any plan.
TEST(PlannerSetup, TheCudaTargetInABuildWithoutIt) {
  if (CODEC_HAS_CUDA) GTEST_SKIP() << "this build has the CUDA engine (tests/engine_cuda covers its setup)";
  EXPECT_TRUE(throws_with([] { make_planner_setup(args_for(PlanTarget::cuda)); }, "this build of CoDec has no CUDA engine"));
  EXPECT_EQ(cuda_device_count(), 0);
}

}  // namespace
}  // namespace codec
