// Plans and runs a small shared-prefix batch on the CPU engine through an
// installed package and checks it against the fp64 reference: exit 0 if it
// matches, 1 if not. An H200 plan's setup must find the installed cost table
// in the folder CODEC_COST_TABLES names (the argument, when given).
#include <codec/engine/cpu_engine.hpp>
#include <codec/engine/planner_setup.hpp>
#include <codec/engine/reference.hpp>
#include <codec/plan/planner.hpp>

#include <cstdio>
#include <cstdint>
#include <string>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const codec::HeadConfig heads{8, 2, 64};
  const int page_size = 4, num_pages = 12, batch = 3;
  // Three requests sharing pages 0-2: [0 1 2 3], [0 1 2 4 5], [0 1 2] with partial last pages.
  const std::vector<std::int32_t> indptr{0, 4, 9, 12}, indices{0, 1, 2, 3, 0, 1, 2, 4, 5, 6, 7, 8},
      last_page_len{2, 4, 3};
  const std::size_t kv_elems = std::size_t(num_pages) * page_size * heads.num_kv_heads * heads.head_dim;
  std::vector<float> k(kv_elems), v(kv_elems), q(std::size_t(batch) * heads.num_qo_heads * heads.head_dim);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  for (float* x : {k.data(), v.data()})
    for (std::size_t i = 0; i < kv_elems; ++i) x[i] = value(rng);
  for (float& x : q) x = value(rng);

  const codec::PageTable table{indptr, indices, last_page_len, page_size, num_pages};
  const codec::Forest forest = codec::derive_forest(table);
  codec::PlannerSetupArgs args;
  args.cpu_threads = 2;
  args.shape = {heads.num_qo_heads, heads.num_kv_heads, heads.head_dim, heads.head_dim, 0.f,
                codec::DType::f32, codec::DType::f32, page_size};
  args.workspace.bytes = 1 << 16;
  const codec::PlannerSetup setup = codec::make_planner_setup(args);
  const codec::Plan plan = codec::make_plan(forest, heads, codec::DType::f32, *setup.cost,
                                            setup.options_for(forest, std::int64_t(indices.size())));
  const codec::PagedKV kv = codec::PagedKV::nhd(k.data(), v.data(), codec::DType::f32, num_pages, page_size,
                                                heads.num_kv_heads, heads.head_dim);
  std::vector<float> out(q.size()), lse(std::size_t(batch) * heads.num_qo_heads);
  alignas(16) static std::byte workspace[1 << 16];
  if (plan.workspace().bytes > sizeof workspace) return 1;
  const codec::AttentionIO io{
      codec::QueryRows::contiguous(q.data(), codec::DType::f32, batch, heads.num_qo_heads, heads.head_dim),
      codec::OutputRows::contiguous(out.data(), codec::DType::f32, batch, heads.num_qo_heads, heads.head_dim),
      codec::LseRows::contiguous(lse.data(), batch, heads.num_qo_heads)};
  codec::run_cpu(plan, kv, io, workspace);
  const codec::ReferenceResult ref = codec::reference_attention(table, kv, heads, q.data());
  const codec::ErrorStats error = codec::compare(out.data(), ref.out);
  std::printf("consumer: %d nodes, %d tasks, CUDA engine built: %d, out %s\n", forest.num_nodes(),
              plan.stats().num_tasks, CODEC_HAS_CUDA, error.describe().c_str());
  if (argc > 1) {  // the installed tables
    codec::PlannerSetupArgs h200;
    h200.target = codec::PlanTarget::h200;
    h200.shape = {32, 8, 128, 128, 0.f, codec::DType::bf16, codec::DType::bf16, 16};
    const std::string table = codec::make_planner_setup(h200).cost_table;
    std::printf("consumer: an H200 plan's cost table: %s\n", table.c_str());
    if (table.rfind(argv[1], 0) != 0) return 1;
  }
  return error.within(1e-5) ? 0 : 1;
}
