#pragma once
// Merge of partial states (POR, DESIGN §5): one warp per (request, qo head)
// row. Row (b, h) merges the partials of the plan's reduction schedule,
// partials[partial_indptr[b] ..] (every chunk of every node on b's path, root
// first), weighting each partial's o by exp(lse − merged lse) (state.hpp), then
// writes out (KV dtype) and lse (fp32, natural log). Requests with a single
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

#include "codec/core/state.hpp"
#include "codec/plan/plan.hpp"
#include "codec/engine/cuda_check.hpp"
#include "kernel_traits.cuh"

namespace codec::cuda {

struct MergeParams {
  PlanView plan;          // views the plan copy at the head of the workspace
  const float* part_o;    // [slots, D] fp32 normalised partial outputs
  const float* part_lse;  // [slots] fp32 natural log
  void* out;              // [B, Hq, D], KV dtype
  float* lse;             // [B, Hq] natural log, or null
};

// ---------------------------------------------------------------- kernel

template <int D, typename T>
__global__ void __launch_bounds__(MergeTraits<D>::kThreads) merge_kernel(const __grid_constant__ MergeParams p) {
  using Tr = MergeTraits<D>;
  const PlanView& plan = p.plan;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * Tr::kWarps + threadIdx.x / 32;  // warp-uniform, so are the early returns
  if (row >= plan.num_requests * plan.num_qo_heads) return;
  const int req = row / plan.num_qo_heads, head = row % plan.num_qo_heads;
  const int first = plan.partial_indptr[req], partials = plan.partial_indptr[req + 1] - first;
  if (partials == 1) return;  // PAC wrote this row

  // Σ_j exp(lse_j − m) · o_j and l = Σ_j exp(lse_j − m) over the partials seen
  // so far, m their largest lse (−inf while all are empty). Each group of up to
  // 32 partials is weighted at once, by a warp max and a warp sum of one
  // exponential per lane, so that the o loads of the group depend on nothing
  // but their slots and stay in flight together. Folding them one by one
  // (merge_weights, state.hpp) chains two exps, a log and two divisions per
  // partial, which on a 33-partial row cost more than the loads.
  float acc[Tr::kAccesses][Tr::kVec] = {};
  float m = kNegInf, l = 0.f;
  for (int base = 0; base < partials; base += 32) {
    // lane i locates partial base + i; a lane past the list keeps slot 0 and
    // weight 0: never read
    const bool found = base + lane < partials;
    const int slot = found ? plan.partial_slot(first + base + lane, head) : 0;
    pdl_wait();  // PAC's partials are complete and visible from here on
    const float part_lse = found ? p.part_lse[slot] : kNegInf;
    const float m_new = fmaxf(m, butterfly<32>(part_lse, MaxOp{}));
    if (m_new == kNegInf) continue;  // every partial so far is empty: nothing to weigh
    const float rescale = m == kNegInf ? 0.f : expf(m - m_new);
    const float e = part_lse == kNegInf ? 0.f : expf(part_lse - m_new);
    l = l * rescale + butterfly<32>(e, SumOp{});
    m = m_new;
#pragma unroll
    for (int a = 0; a < Tr::kAccesses; ++a)
#pragma unroll
      for (int k = 0; k < Tr::kVec; ++k) acc[a][k] *= rescale;
    const int count = min(32, partials - base);
#pragma unroll 8
    for (int i = 0; i < count; ++i) {
      const int s = __shfl_sync(0xffffffffu, slot, i);
      const float w = __shfl_sync(0xffffffffu, e, i);
      const float* src = p.part_o + std::int64_t(s) * D;
#pragma unroll
      for (int a = 0; a < Tr::kAccesses; ++a) {
        const float* at = src + (32 * a + lane) * Tr::kVec;
        if constexpr (Tr::kVec == 4) {
          const float4 v = *reinterpret_cast<const float4*>(at);
          acc[a][0] += w * v.x, acc[a][1] += w * v.y, acc[a][2] += w * v.z, acc[a][3] += w * v.w;
        } else {
          const float2 v = *reinterpret_cast<const float2*>(at);
          acc[a][0] += w * v.x, acc[a][1] += w * v.y;
        }
      }
    }
  }
  // normalise; a row whose partials are all empty is the empty state (o = 0, lse = −inf)
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
  const float lse = l > 0.f ? m + logf(l) : kNegInf;
#pragma unroll
  for (int a = 0; a < Tr::kAccesses; ++a)
#pragma unroll
    for (int k = 0; k < Tr::kVec; ++k) acc[a][k] *= inv_l;

  // epilogue: the row in the KV dtype, kVec / 2 packed pairs per lane and access
  T* out = static_cast<T*>(p.out) + std::int64_t(row) * D;
#pragma unroll
  for (int a = 0; a < Tr::kAccesses; ++a) {
    std::uint32_t packed[Tr::kVec / 2];
#pragma unroll
    for (int k = 0; k < Tr::kVec / 2; ++k) packed[k] = pack2<T>(acc[a][2 * k], acc[a][2 * k + 1]);
    T* at = out + (32 * a + lane) * Tr::kVec;
    if constexpr (Tr::kVec == 4)
      *reinterpret_cast<uint2*>(at) = make_uint2(packed[0], packed[1]);
    else
      *reinterpret_cast<std::uint32_t*>(at) = packed[0];
  }
  if (lane == 0 && p.lse != nullptr) p.lse[row] = lse;
}

// ---------------------------------------------------------------- host launcher

// `programmatic`: launch as a programmatic dependent of the previous kernel on
// the stream (PAC), sm_90+ only; stream capture records it as a programmatic
// graph edge.
template <int D, typename T>
void launch_merge(const MergeParams& params, bool programmatic, cudaStream_t stream) {
  using Tr = MergeTraits<D>;
  const std::int64_t rows = std::int64_t(params.plan.num_requests) * params.plan.num_qo_heads;
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>((rows + Tr::kWarps - 1) / Tr::kWarps);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(Tr::kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic ? 1 : 0;
  CODEC_CUDA_CHECK(cudaLaunchKernelEx(&config, merge_kernel<D, T>, params));
  CODEC_CUDA_CHECK_LAUNCH("merge_kernel", stream);
}

}  // namespace codec::cuda
