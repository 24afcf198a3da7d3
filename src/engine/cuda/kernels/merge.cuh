#pragma once
// Merge of partial states (POR, docs/DESIGN.md §5): one to four warps per (request,
// qo head) row. Row (b, h) merges the partials of the plan's reduction schedule,
// partials[partial_indptr[b] ..] (every chunk of every node on b's path, root
// first), weighting each partial's o by exp(lse − merged lse) (state.hpp), then
// writes out (KV dtype) and lse (fp32, natural log or base 2). Requests with a single
// partial were written by PAC and are skipped; empty partials weigh 0, and a
// row with no partial at all would come out as the empty state (o = 0, lse =
// −inf), never NaN.
//
// On sm_90 the merge is launched with programmatic stream serialisation: it
// starts while PAC runs its last tasks (pac.cuh), reads its slots from the
// plan (which PAC does not write), and only then waits in pdl_wait for PAC's
// partials. A block that cannot start before PAC's blocks leave still finds
// its slots two dependent loads after its request (the schedule is a flat
// list per request, not a path to walk).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "codec/core/error.hpp"
#include "codec/core/state.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/primitives/warp.cuh"
#include "engine/cuda/tile/merge_rows.cuh"

namespace codec::cuda {

struct MergeParams {
  PlanView plan;          // views the plan copy at the head of the workspace
  const float* part_o;    // [slots, D] fp32 normalised partial outputs
  const float* part_lse;  // [slots] fp32 natural log
  void* out;              // row (request, qo head) at out_rows.at(request, head), KV dtype
  RowStrides out_rows;
  float* lse;             // lse of (request, qo head) at lse_rows.at(request, head), or null
  RowStrides lse_rows;
  float lse_scale;        // 1 (natural log) or log2(e) (base 2)
  int warps_per_row = 1;  // 1, 2 or 4 (merge_warps_per_row)
};

// ---------------------------------------------------------------- kernel

// The partials in the workspace (tile/merge_rows.cuh's Source): a ref is the slot.
template <int D>
struct WorkspacePartials {
  const float* part_o;
  const float* part_lse;
  __device__ int ref(int slot) const { return slot; }
  __device__ float lse(int slot) const { return part_lse[slot]; }
  __device__ void o(int slot, int a, float (&v)[MergeTraits<D>::kVec]) const {
    const float* at = part_o + std::int64_t(slot < 0 ? 0 : slot) * D + (32 * a + threadIdx.x % 32) * MergeTraits<D>::kVec;
    load_partial<D>(at, slot < 0, v);
  }
};

// With one warp per row, a block of 4 warps merges 4 rows and takes no shared
// memory. With W = warps_per_row > 1 (the host picks W so that the longest
// row's partials fit one round where it can, merge_warps_per_row), a block of
// W warps merges one row: its warps split the partials and fold into warp 0
// one at a time through a single 32-lane buffer (768 bytes at D = 128). Either
// way a merge block fits beside two PAC blocks, which leave 2 KiB of an SM's
// shared memory (1 KiB of it the block's reservation), so it starts during
// PAC's last tasks (PDL) and has its slots loaded when PAC ends.
template <int D, typename T>
__global__ void __launch_bounds__(MergeTraits<D>::kThreads) merge_kernel(const __grid_constant__ MergeParams p) {
  using Tr = MergeTraits<D>;
  extern __shared__ float4 merge_smem[];  // [32] WarpMerge when warps_per_row > 1, else none
  const PlanView& plan = p.plan;
  const int warp = threadIdx.x / 32, W = p.warps_per_row;
  const int row = W > 1 ? blockIdx.x : blockIdx.x * Tr::kWarps + warp, part = W > 1 ? warp : 0;  // warp-uniform
  const bool active = row < plan.num_requests * plan.num_qo_heads;
  const int req = active ? row / plan.num_qo_heads : 0, head = active ? row % plan.num_qo_heads : 0;
  const int first = active ? plan.partial_indptr[req] : 0;
  const int partials = active ? plan.partial_indptr[req + 1] - first : 0;
  const bool merged = active && partials != 1;  // a single partial: PAC wrote this row

  WarpMerge<D> w;
  if (merged) {
    const int slot = merge_slot<D>(plan, first, partials, head, part * Tr::kBatch);  // the plan is not PAC's to write
    pdl_wait();  // PAC's partials are complete and visible from here on
    merge_fold<D>(plan, WorkspacePartials<D>{p.part_o, p.part_lse}, first, partials, head, part, W, slot, w);
  }
  if (W > 1) {  // uniform over the grid
    merge_combine<D>(w, part, W, reinterpret_cast<WarpMerge<D>*>(merge_smem));
    if (part != 0) return;
  }
  if (merged) merge_write_row<D, T>(p.out, p.out_rows, p.lse, p.lse_rows, p.lse_scale, req, head, w);
}

// ---------------------------------------------------------------- host launcher

// Warps per row for a plan whose longest row merges max_partials partials:
// one while a warp's round holds them, else 2 or 4 (fewer rows per block).
template <int D>
int merge_warps_per_row(int max_partials) {
  using Tr = MergeTraits<D>;
  return max_partials <= Tr::kBatch ? 1 : max_partials <= 2 * Tr::kBatch ? 2 : Tr::kWarps;
}

// `programmatic`: launch as a programmatic dependent of the previous kernel on
// the stream (PAC), sm_90+ only; stream capture records it as a programmatic
// graph edge.
template <int D, typename T>
void launch_merge(const MergeParams& params, bool programmatic, cudaStream_t stream) {
  using Tr = MergeTraits<D>;
  const std::int64_t rows = std::int64_t(params.plan.num_requests) * params.plan.num_qo_heads;
  if (rows == 0) return;
  CODEC_CHECK(params.warps_per_row == 1 || params.warps_per_row == 2 || params.warps_per_row == Tr::kWarps,
              "launch_merge: warps_per_row ", params.warps_per_row, " is not 1, 2 or ", Tr::kWarps);
  const bool split = params.warps_per_row > 1;  // one row per block of warps_per_row warps
  const std::int64_t rows_per_block = split ? 1 : Tr::kWarps;
  const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(split ? 32 * params.warps_per_row : Tr::kThreads);
  config.dynamicSmemBytes = split ? 32 * sizeof(WarpMerge<D>) : 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic ? 1 : 0;
  CODEC_CUDA_CHECK(cudaLaunchKernelEx(&config, merge_kernel<D, T>, params));
  CODEC_CUDA_CHECK_LAUNCH("merge_kernel", stream);
}

}  // namespace codec::cuda
