#pragma once
// CPU engine: runs a Plan with OpenMP threads. Partial attention per task (each
// KV tile is converted to fp32 once and applied to all of the task's rows),
// then the per-row merges of the reduction schedule. fp32 accumulation.
#include <cstddef>
#include <span>

#include "codec/forest/page_table.hpp"
#include "codec/plan/plan.hpp"

namespace codec {

// Query rows [B, Hq, D] in the dtype of the KV cache, contiguous.
// out [B, Hq, D] fp32, lse [B, Hq] fp32 natural log (may be null).
struct AttentionIO {
  const void* q = nullptr;
  float* out = nullptr;
  float* lse = nullptr;
};

struct CpuOptions {
  int num_threads = 0;  // 0: OpenMP's default
};

// workspace must hold plan.workspace().bytes bytes, 16-byte aligned. Besides
// it, a run allocates only each thread's scratch for one task.
void run_cpu(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace,
             const CpuOptions& options = {});

}  // namespace codec
