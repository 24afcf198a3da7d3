#pragma once
// One warp's merge of a (request, qo head) row's partial states (POR,
// docs/DESIGN.md §5), shared by the merge kernel (kernels/merge.cuh) and by
// PAC's fused merge (kernels/pac.cuh): the row's partials are
// plan.partials[first .. first + partials), each chunk of each node on the
// request's path, root first; partial j's o is weighted by exp(lse_j − merged
// lse) (state.hpp). Empty partials weigh 0, and a row whose partials are all
// empty comes out as the empty state (o = 0, lse = −inf), never NaN.
#include <cstdint>

#include "codec/core/state.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/ptx.cuh"
#include "engine/cuda/primitives/warp.cuh"

namespace codec::cuda {

// A warp's share of a row's merge: the softmax state of its partials (m = the
// largest lse, l = Σ exp(lse_j − m)) and acc = Σ exp(lse_j − m) · o_j (this
// lane's kAccesses × kVec floats of the row).
template <int D>
struct WarpMerge {
  SoftmaxState state;
  float acc[MergeTraits<D>::kAccesses][MergeTraits<D>::kVec] = {};
};

// Where the partials are (PAC writes them, the merge reads them) and where
// rows go (PAC writes those of requests with a single partial, the merge the
// others).
struct MergeIO {
  float* part_o;          // [slots, D] fp32 normalised partial outputs
  float* part_lse;        // [slots] fp32 natural log
  void* out;              // row (request, qo head) at out_rows.at(request, head), KV dtype
  RowStrides out_rows;
  float* lse;             // lse of (request, qo head) at lse_rows.at(request, head), or null
  RowStrides lse_rows;
  float lse_scale;        // 1 (natural log) or log2(e) (base 2)
};

// Folds this warp's partials of the row into w: partials j ≡ part (mod
// warps_per_row) in rounds of kBatch, lane i < kBatch holding partial i's slot.
// A round's lse and o loads depend on nothing but the slots, so they are all in
// flight together: a row with up to warps_per_row · kBatch partials costs one
// round trip to L2; each further round adds two (its slots, then its data).
// The loads bypass L1 (ld.global.cg): in the fused merge other SMs wrote the
// partials during this kernel, and L1 is not coherent with their writes.
// `wait` runs once, after the first round's slots are loaded and before any
// partial is: the merge kernel waits there for PAC (pdl_wait), which leaves
// the plan alone, so the slots' loads overlap PAC's end.
template <int D, typename Wait>
__device__ __forceinline__ void fold_partials(const PlanView& plan, const MergeIO& io, int first, int partials,
                                              int head, int part, int warps_per_row, Wait wait, WarpMerge<D>& w) {
  using Tr = MergeTraits<D>;
  constexpr int B = Tr::kBatch;
  const int lane = threadIdx.x % 32;
  auto lane_slot = [&](int base) {  // −1: no partial (past the list, or a lane ≥ kBatch)
    return lane < B && base + lane < partials ? plan.partial_slot(first + base + lane, head) : -1;
  };
  const int stride = warps_per_row * B;
  int slot = lane_slot(part * B);
  wait();
  for (int base = part * B; base < partials; base += stride) {
    if (base != part * B) slot = lane_slot(base);
    const float lse = slot >= 0 ? __ldcg(io.part_lse + slot) : kNegInf;
    float v[B][Tr::kAccesses][Tr::kVec];
#pragma unroll
    for (int i = 0; i < B; ++i) {
      const int s = __shfl_sync(0xffffffffu, slot, i);
#pragma unroll
      for (int a = 0; a < Tr::kAccesses; ++a) {
        const float* at = io.part_o + std::int64_t(s < 0 ? 0 : s) * D + (32 * a + lane) * Tr::kVec;
        if constexpr (Tr::kVec == 4) {
          const float4 x = s < 0 ? make_float4(0.f, 0.f, 0.f, 0.f) : __ldcg(reinterpret_cast<const float4*>(at));
          v[i][a][0] = x.x, v[i][a][1] = x.y, v[i][a][2] = x.z, v[i][a][3] = x.w;
        } else {
          const float2 x = s < 0 ? make_float2(0.f, 0.f) : __ldcg(reinterpret_cast<const float2*>(at));
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

// Normalises a warp's merged row and writes it: o in the KV dtype, kVec / 2
// packed pairs per lane and access, and its lse.
template <int D, typename T>
__device__ __forceinline__ void store_merged_row(const MergeIO& io, int req, int head, const WarpMerge<D>& w) {
  using Tr = MergeTraits<D>;
  const int lane = threadIdx.x % 32;
  const float inv_l = w.state.inv_l(), lse = w.state.lse();
  T* out = static_cast<T*>(io.out) + io.out_rows.at(req, head);
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
  if (lane == 0 && io.lse != nullptr) io.lse[io.lse_rows.at(req, head)] = lse * io.lse_scale;
}

}  // namespace codec::cuda
