#pragma once
// CPU engine: runs a Plan with OpenMP threads. Partial attention per task (each
// KV tile is converted to fp32 once and applied to all of the task's rows),
// then the per-row merges of the reduction schedule. fp32 accumulation.
#include <cstddef>
#include <cstdint>
#include <span>

#include "codec/engine/attention_io.hpp"
#include "codec/forest/page_copy.hpp"
#include "codec/forest/page_table.hpp"
#include "codec/plan/plan.hpp"
#include "codec/plan/planner.hpp"

namespace codec {

// Rows one CPU task holds: it converts each KV tile to fp32 once for all its
// rows, and 256 rows stay in L2 (256 × 128 dims × 4 B = 128 KiB of queries and
// as much of output), so a shared node is cut into fewer row tiles than on a GPU.
inline constexpr int kCpuTileRows = 256;

// Planner options for the CPU engine on `threads` threads: one block a thread.
PlannerOptions cpu_planner_options(int threads);

struct CpuOptions {
  int num_threads = 0;  // 0: OpenMP's default
};

// q in the plan's dtype; out in it or in fp32 (AttentionIO says which rows).
// workspace must hold plan.workspace().bytes bytes, 16-byte aligned. Besides
// it, a run allocates only each thread's scratch for one task.
void run_cpu(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace,
             const CpuOptions& options = {});

// Most partial slots a CPU workspace of `bytes` bytes holds (PlannerOptions::max_slots).
std::int64_t cpu_workspace_slots(std::size_t bytes, int head_dim);

// Merges two partial states row by row (state.hpp): o_a, o_b, out [N, H, D] in
// fp16, bf16 or fp32 (each its own), lse_a, lse_b, lse_out [N, H] fp32 in
// `base`. An empty state (lse −inf) is the identity; two give the empty state.
// out and lse_out may alias an input.
void merge_states_cpu(const QueryRows& o_a, const LseRows& lse_a, const QueryRows& o_b, const LseRows& lse_b,
                      const OutputRows& out, const LseRows& lse_out, LseBase base);

// Applies a forest manager's page copies to the pool, in order: the first
// num_tokens token slots of page src to page dst, every kv head. kv.k and kv.v
// are written.
void copy_pages_cpu(const PagedKV& kv, std::span<const PageCopy> copies);

}  // namespace codec
