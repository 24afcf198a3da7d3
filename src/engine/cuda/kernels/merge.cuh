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
// Where its code is sm_90's (MergeKernels::launch, programmatic_here) the
// merge is launched with programmatic stream serialisation: it
// starts while PAC runs its last tasks (pac.cuh), or, where a plan has no PAC
// kernel (cuda_launches), on the SMs that no wide block holds while the wide
// kernel runs; it reads its slots from the plan (which neither writes), and
// only then waits in pdl_wait for the partials. A block that cannot start
// before the blocks ahead of it leave still finds its slots two dependent
// loads after its request (the schedule is a flat list per request, not a
// path to walk).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "codec/core/error.hpp"
#include "codec/core/state.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/kernels/launch.cuh"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/primitives/warp.cuh"

namespace codec::cuda {

// ---------------------------------------------------------------- kernel

// A warp's share of a row's merge: the softmax state of its partials (m = the
// largest lse, l = Σ exp(lse_j − m)) and acc = Σ exp(lse_j − m) · o_j (this
// lane's kAccesses × kVec floats of the row).
template <int D>
struct WarpMerge {
  SoftmaxState state;
  float acc[MergeTraits<D>::kAccesses][MergeTraits<D>::kVec] = {};
};

// Folds this warp's partials of the row into w: partials j ≡ part (mod
// warps_per_row) in rounds of kBatch, lane i < kBatch holding partial i's slot.
// A round's lse and o loads depend on nothing but the slots, so they are all in
// flight together: after PAC, a row with up to warps_per_row · kBatch partials
// costs one round trip to L2; each further round adds two (its slots, then its
// data).
template <int D>
__device__ __forceinline__ void merge_warp_share(const MergeParams& p, int first, int partials, int head, int part,
                                                 int warps_per_row, WarpMerge<D>& w) {
  using Tr = MergeTraits<D>;
  constexpr int B = Tr::kBatch;
  const PlanView& plan = p.plan;
  const int lane = threadIdx.x % 32;
  auto lane_slot = [&](int base) {  // −1: no partial (past the list, or a lane ≥ kBatch)
    return lane < B && base + lane < partials ? plan.partial_slot(first + base + lane, head) : -1;
  };
  const int stride = warps_per_row * B;
  int slot = lane_slot(part * B);  // before the wait: the plan is not PAC's to write
  pdl_wait();                      // PAC's partials are complete and visible from here on
  for (int base = part * B; base < partials; base += stride) {
    if (base != part * B) slot = lane_slot(base);
    const float lse = slot >= 0 ? p.part_lse[slot] : kNegInf;
    float v[B][Tr::kAccesses][Tr::kVec];
#pragma unroll
    for (int i = 0; i < B; ++i) {
      const int s = __shfl_sync(0xffffffffu, slot, i);
#pragma unroll
      for (int a = 0; a < Tr::kAccesses; ++a) {
        const float* at = p.part_o + std::int64_t(s < 0 ? 0 : s) * D + (32 * a + lane) * Tr::kVec;
        if constexpr (Tr::kVec == 4) {
          const float4 x = s < 0 ? make_float4(0.f, 0.f, 0.f, 0.f) : *reinterpret_cast<const float4*>(at);
          v[i][a][0] = x.x, v[i][a][1] = x.y, v[i][a][2] = x.z, v[i][a][3] = x.w;
        } else {
          const float2 x = s < 0 ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(at);
          v[i][a][0] = x.x, v[i][a][1] = x.y;
        }
      }
    }
    const float rescale = w.state.rescale(butterfly<32>(lse, MaxOp{}));  // m covers the round's partials
    const float e = weight_below(lse, w.state.m);                          // this lane's partial's weight
    w.state.l += butterfly<32>(e, SumOp{});
#pragma unroll
    for (int i = 0; i < B; ++i) {
      const float wi = __shfl_sync(0xffffffffu, e, i);
#pragma unroll
      for (int a = 0; a < Tr::kAccesses; ++a)
#pragma unroll
        for (int k = 0; k < Tr::kVec; ++k) w.acc[a][k] = (i == 0 ? w.acc[a][k] * rescale : w.acc[a][k]) + wi * v[i][a][k];
    }
  }
}

// With one warp per row, a block of 4 warps merges 4 rows and takes no shared
// memory. With W = warps_per_row > 1 (the host picks W so that the longest
// row's partials fit one round where it can, merge_warps_per_row), a block of
// W warps merges one row: its warps split the partials and fold into warp 0
// one at a time through a single 32-lane buffer (768 bytes at D = 128). Either
// way a merge block fits beside two PAC blocks, which leave 2 KiB of an SM's
// shared memory (1 KiB of it the block's reservation), so it starts during
// PAC's last tasks (PDL) and has its slots loaded when PAC ends. (Beside a
// wide block, which leaves no registers, none fits.)
template <int D, typename T>
__global__ void __launch_bounds__(MergeTraits<D>::kThreads) merge_kernel(const __grid_constant__ MergeParams p) {
  using Tr = MergeTraits<D>;
  extern __shared__ float4 merge_smem[];  // [32] WarpMerge when warps_per_row > 1, else none
  const PlanView& plan = p.plan;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, W = p.warps_per_row;
  const int row = W > 1 ? blockIdx.x : blockIdx.x * Tr::kWarps + warp, part = W > 1 ? warp : 0;  // warp-uniform
  const bool active = row < plan.num_requests * plan.num_qo_heads;
  const int req = active ? row / plan.num_qo_heads : 0, head = active ? row % plan.num_qo_heads : 0;
  const int first = active ? plan.partial_indptr[req] : 0;
  const int partials = active ? plan.partial_indptr[req + 1] - first : 0;
  const bool merged = active && partials != 1;  // a single partial: PAC wrote this row

  WarpMerge<D> w;
  if (merged) merge_warp_share<D>(p, first, partials, head, part, W, w);
  if (W > 1) {  // uniform over the grid
    WarpMerge<D>* share = reinterpret_cast<WarpMerge<D>*>(merge_smem);
    for (int q = 1; q < W; ++q) {  // fold warp q's share into warp 0's
      if (part == q) share[lane] = w;
      __syncthreads();
      if (part == 0) {
        const WarpMerge<D>& o = share[lane];
        const SoftmaxState::Factors f = w.state.merge(o.state);
#pragma unroll
        for (int a = 0; a < Tr::kAccesses; ++a)
#pragma unroll
          for (int k = 0; k < Tr::kVec; ++k) w.acc[a][k] = w.acc[a][k] * f.self + o.acc[a][k] * f.other;
      }
      __syncthreads();  // warp 0 has read the buffer: the next share may overwrite it
    }
    if (part != 0) return;
  }
  if (!merged) return;

  // normalise; a row whose partials are all empty is the empty state (o = 0,
  // lse = −inf), or with a sink the sink alone (o = 0, lse = sink). Rows of
  // no partial (past a capacity's batch) stay the empty state.
  float inv_l = w.state.inv_l(), lse = w.state.lse();
  if (p.sinks != nullptr && partials > 0) {
    const MergeWeights s = merge_weights(lse, p.sinks[head]);
    inv_l *= s.w1;
    lse = s.lse;
  }
  // the row in the KV dtype, kVec / 2 packed pairs per lane and access
  T* out = static_cast<T*>(p.out) + p.out_rows.at(req, head);
#pragma unroll
  for (int a = 0; a < Tr::kAccesses; ++a) {
    std::uint32_t packed[Tr::kVec / 2];
#pragma unroll
    for (int k = 0; k < Tr::kVec / 2; ++k) packed[k] = pack2<T>(w.acc[a][2 * k] * inv_l, w.acc[a][2 * k + 1] * inv_l);
    T* at = out + (32 * a + lane) * Tr::kVec;
    if constexpr (Tr::kVec == 4)
      *reinterpret_cast<uint2*>(at) = make_uint2(packed[0], packed[1]);
    else
      *reinterpret_cast<std::uint32_t*>(at) = packed[0];
  }
  if (lane == 0 && p.lse != nullptr) p.lse[p.lse_rows.at(req, head)] = lse * p.lse_scale;
}

// ---------------------------------------------------------------- host launcher

// Whether the merge the current device runs was compiled for sm_90 or later
// (its PTX's virtual architecture): only that code waits for its primary grid
// in pdl_wait, so only it may start early. An sm_90 device that JIT-compiles a
// build's PTX for an older target (-DCMAKE_CUDA_ARCHITECTURES=80) runs code
// without the wait, which must be launched in order.
template <int D, typename T>
bool programmatic_here() {
  static PerDeviceAnswer cached;
  return cached.get([] {
    cudaFuncAttributes attributes{};
    CODEC_CUDA_CHECK(cudaFuncGetAttributes(&attributes, merge_kernel<D, T>));
    return attributes.ptxVersion >= 90;
  });
}

template <int D, typename T>
void MergeKernels<D, T>::launch(const MergeParams& params, cudaStream_t stream) {
  using Tr = MergeTraits<D>;
  const std::int64_t rows = std::int64_t(params.plan.num_requests) * params.plan.num_qo_heads;
  if (rows == 0) return;
  CODEC_CHECK(params.warps_per_row == 1 || params.warps_per_row == 2 || params.warps_per_row == Tr::kWarps,
              "MergeKernels::launch: warps_per_row ", params.warps_per_row, " is not 1, 2 or ", Tr::kWarps);
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
  config.numAttrs = programmatic_here<D, T>() ? 1 : 0;
  CODEC_CUDA_CHECK(cudaLaunchKernelEx(&config, merge_kernel<D, T>, params));
  CODEC_CUDA_CHECK_LAUNCH("merge_kernel", stream);
}

}  // namespace codec::cuda
