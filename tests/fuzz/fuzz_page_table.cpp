// Fuzz target: page tables as a caller hands them to the library (the
// Python plan, derive_forest, the transformers integration's block tables).
// The first byte picks the form; the rest are its fields as raw bytes:
//   0: CSR (kv_indptr, kv_indices, kv_last_page_len), every value raw, so
//      that validation meets any int32 a buffer could hold;
//   1: CSR whose pages and lengths are drawn in range, so that most tables
//      are valid and derive_forest and the planner see every shape of forest;
//   2: a padded block table (vLLM's, transformers'), raw.
// A table validate() accepts must derive a valid forest whose requests hold
// exactly their tokens, and a plan that attends every row to every token of
// its request once.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/forest/forest.hpp"
#include "codec/plan/planner.hpp"
#include "fuzz_check.hpp"

namespace codec::fuzz {
namespace {

// The forest of a valid table, then a plan of it under options the input picks.
void derive_and_plan(const PageTable& table, Bytes& in) {
  const Forest forest = derive_forest(table);
  forest.validate();
  FUZZ_CHECK(forest.num_requests() == table.num_requests());
  for (int r = 0; r < table.num_requests(); ++r) FUZZ_CHECK(forest.request_tokens(r) == table.request_tokens(r));
  FUZZ_CHECK(forest.unique_tokens() <= forest.flat_tokens());
  const Forest flat = flatten(forest);
  flat.validate();
  FUZZ_CHECK(flat.unique_tokens() == forest.flat_tokens());

  const int kv_heads = 1 + in.take<std::uint8_t>() % 4, group = 1 + in.take<std::uint8_t>() % 8;
  const int head_dim = 64 << (in.take<std::uint8_t>() % 3);
  const HeadConfig heads{kv_heads * group, kv_heads, head_dim, 0.f};
  const std::uint8_t how = in.take<std::uint8_t>();
  PlannerOptions options = how % 2 ? cuda_planner_options(heads, 1 + how / 2 % 16, 2, true)
                                   : cpu_planner_options(1 + how / 2 % 8);
  const RooflineCostModel cost(RooflineParams::cpu(4), heads, DType::bf16);
  Plan plan;
  try {
    plan = make_plan(forest, heads, DType::bf16, cost, options);
  } catch (const Error&) {
    return;  // a limit of the plan's int32 arrays, refused with a message
  }
  // Every row (request, qo head) attends to each token of its request once:
  // Σ over the tasks of its rows' key counts = its request's tokens. Tails
  // (keys a wide parent takes in for a child) are counted through their tasks.
  const PlanView p = plan.view();
  FUZZ_CHECK(p.num_requests == forest.num_requests());
  std::vector<std::int64_t> keys(std::size_t(forest.num_requests()) * heads.num_qo_heads, 0);
  for (int t = 0; t < p.num_tasks; ++t) {
    const Task& task = p.tasks[t];
    const ForestNode& node = forest.nodes[std::size_t(task.node)];
    FUZZ_CHECK(0 <= task.kv_begin && task.kv_begin < task.kv_end && task.kv_end <= node.num_tokens);
    FUZZ_CHECK(0 <= task.row_begin && task.row_begin < task.row_end && task.row_end <= node.num_reqs * group);
    const PlanView::TailRange tails = p.task_tails(task);
    for (int v = task.row_begin; v < task.row_end; ++v) {
      const int req = forest.reqs[std::size_t(node.req_begin) + std::size_t(v / group)];
      const int head = task.kv_head * group + v % group, entry = task.req_begin + v / group;  // plan's node_reqs
      // The row's share of its own request's tail: the part of it inside the task's range.
      const int tail = p.tails ? std::max(0, std::min(p.tail_indptr[entry + 1], tails.end) -
                                                 std::max(p.tail_indptr[entry], tails.begin))
                               : 0;
      keys[std::size_t(req) * heads.num_qo_heads + head] += task.kv_end - task.kv_begin + tail;
    }
  }
  for (int r = 0; r < forest.num_requests(); ++r)
    for (int h = 0; h < heads.num_qo_heads; ++h)
      FUZZ_CHECK(keys[std::size_t(r) * heads.num_qo_heads + h] == forest.request_tokens(r));
}

void check_csr(Bytes& in, bool in_range) {
  const int batch = 1 + in.take<std::uint8_t>() % 64;
  PageTableArrays a;
  if (in_range) {
    a.page_size = 1 + in.take<std::uint8_t>() % 32;
    a.num_pages = 1 + in.take<std::uint8_t>() % 64;  // few pages: requests share them often
    for (int r = 0; r < batch; ++r) {
      const int pages = 1 + in.take<std::uint8_t>() % 8;
      for (int i = 0; i < pages; ++i) a.indices.push_back(in.take<std::uint8_t>() % std::int32_t(a.num_pages));
      a.indptr.push_back(std::int32_t(a.indices.size()));
      a.last_page_len.push_back(1 + in.take<std::uint8_t>() % a.page_size);
    }
  } else {
    a.page_size = in.take<std::int32_t>();
    a.num_pages = in.take<std::int64_t>();
    a.indptr.assign(std::size_t(batch) + 1, 0);
    for (std::int32_t& v : a.indptr) v = in.take<std::int32_t>();
    a.last_page_len.assign(std::size_t(batch) + in.take<std::uint8_t>() % 3 - 1, 0);  // one short, exact, one long
    for (std::int32_t& v : a.last_page_len) v = in.take<std::int32_t>();
    a.indices.assign(std::min<std::size_t>(in.left() / 4, 4096), 0);
    for (std::int32_t& v : a.indices) v = in.take<std::int32_t>();
  }
  const PageTable table = a.view();
  try {
    table.validate();
  } catch (const Error&) {
    FUZZ_CHECK(!in_range);  // tables drawn in range are valid
    return;
  }
  derive_and_plan(table, in);
}

void check_block_table(Bytes& in) {
  BlockTable t;
  t.rows = in.take<std::uint8_t>() % 32;
  t.cols = in.take<std::uint8_t>() % 32;
  t.row_stride = t.cols + in.take<std::uint8_t>() % 3;
  t.cumulative = in.take<std::uint8_t>() % 2;
  const int page_size = in.take<std::int32_t>();
  const std::int64_t num_pages = in.take<std::int64_t>();
  std::vector<std::int32_t> seq_lens(std::size_t(t.rows) + 1), blocks(std::size_t(t.rows) * t.row_stride);
  for (std::int32_t& v : seq_lens) v = in.take<std::int32_t>();
  for (std::int32_t& v : blocks) v = in.take<std::int32_t>();
  t.blocks = blocks.data();
  t.seq_lens = seq_lens.data();
  PageTableArrays a;
  try {
    a = page_table_from_block_table(t, page_size, num_pages);
  } catch (const Error&) {
    return;
  }
  if (a.indptr.size() < 2) return;  // no rows with tokens: an empty batch, which plans nothing
  const PageTable table = a.view();
  table.validate();  // what the conversion accepts is a valid table
  derive_and_plan(table, in);
}

}  // namespace
}  // namespace codec::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  codec::fuzz::Bytes in(data, size);
  switch (in.take<std::uint8_t>() % 3) {
    case 0: codec::fuzz::check_csr(in, /*in_range=*/false); break;
    case 1: codec::fuzz::check_csr(in, /*in_range=*/true); break;
    default: codec::fuzz::check_block_table(in); break;
  }
  return 0;
}
