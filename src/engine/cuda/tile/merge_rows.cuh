#pragma once
// A row's merge of partial states (POR, docs/DESIGN.md §5): the warps of a
// row fold its partials, weighting each partial's o by exp(lse − merged lse)
// (state.hpp), combine their shares and write the row. Shared by the merge
// kernel (kernels/merge.cuh), whose partials are in the workspace, and the
// PAC kernel's clusters (kernels/pac.cuh), whose partials are in the shared
// memory of the cluster's blocks. A Source says where a partial is:
//   int ref(int slot) const           this lane's handle of the partial in
//                                     workspace slot `slot` (≥ 0), called by
//                                     every lane (slot −1: none, returns −1)
//   float lse(int ref) const          its lse (natural log)
//   void o(int ref, int a, float (&v)[kVec]) const
//                                     this lane's kVec floats of its o at
//                                     access a: dims (32 a + lane) · kVec ..;
//                                     zeros for ref −1
#include <cstdint>

#include "codec/core/state.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
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

// v = the kVec floats at `at`, or zeros where `none`.
template <int D>
__device__ __forceinline__ void load_partial(const float* at, bool none, float (&v)[MergeTraits<D>::kVec]) {
  if constexpr (MergeTraits<D>::kVec == 4) {
    const float4 x = none ? make_float4(0.f, 0.f, 0.f, 0.f) : *reinterpret_cast<const float4*>(at);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    const float2 x = none ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(at);
    v[0] = x.x, v[1] = x.y;
  }
}

// This lane's slot of the row's partial part · kBatch + lane, the first of
// warp `part`'s rounds (−1: past the list, or a lane ≥ kBatch). The plan's
// reduction schedule only: a caller loads it before it waits for the partials.
template <int D>
__device__ __forceinline__ int merge_slot(const PlanView& plan, int first, int partials, int head, int index) {
  const int lane = threadIdx.x % 32;
  return lane < MergeTraits<D>::kBatch && index + lane < partials ? plan.partial_slot(first + index + lane, head) : -1;
}

// Folds warp `part`'s partials of the row (j ≡ part mod warps, in rounds of
// kBatch) into w; `slot` is this lane's merge_slot of the first round. A
// round's lse and o loads depend on nothing but its refs, so they are all in
// flight together: a row with up to warps · kBatch partials costs one round
// trip; each further round adds two (its slots, then its data).
template <int D, typename Source>
__device__ __forceinline__ void merge_fold(const PlanView& plan, const Source& src, int first, int partials, int head,
                                           int part, int warps, int slot, WarpMerge<D>& w) {
  using Tr = MergeTraits<D>;
  constexpr int B = Tr::kBatch;
  const int stride = warps * B;
  for (int base = part * B; base < partials; base += stride) {
    if (base != part * B) slot = merge_slot<D>(plan, first, partials, head, base);
    const int ref = src.ref(slot);
    const float lse = ref >= 0 ? src.lse(ref) : kNegInf;
    float v[B][Tr::kAccesses][Tr::kVec];
#pragma unroll
    for (int i = 0; i < B; ++i) {
      const int r = __shfl_sync(0xffffffffu, ref, i);
#pragma unroll
      for (int a = 0; a < Tr::kAccesses; ++a) src.o(r, a, v[i][a]);
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

// Combines the shares of a row's `warps` warps (`part` = 0 .. warps − 1)
// into its first warp's, one at a time through `buffer`, the row's 32
// WarpMerge (768 bytes at D = 128). Every warp of the block calls it (it
// synchronises the block); nothing when warps is 1.
template <int D>
__device__ __forceinline__ void merge_combine(WarpMerge<D>& w, int part, int warps, WarpMerge<D>* buffer) {
  using Tr = MergeTraits<D>;
  const int lane = threadIdx.x % 32;
  for (int q = 1; q < warps; ++q) {  // fold warp q's share into warp 0's
    if (part == q) buffer[lane] = w;
    __syncthreads();
    if (part == 0) {
      const WarpMerge<D>& o = buffer[lane];
      const SoftmaxState::Factors f = w.state.merge(o.state);
#pragma unroll
      for (int a = 0; a < Tr::kAccesses; ++a)
#pragma unroll
        for (int k = 0; k < Tr::kVec; ++k) w.acc[a][k] = w.acc[a][k] * f.self + o.acc[a][k] * f.other;
    }
    __syncthreads();  // warp 0 has read the buffer: the next share may overwrite it
  }
}

// Writes row (req, head) of a merged state, normalised: o in the KV dtype,
// kVec / 2 packed pairs per lane and access, and lse (fp32, times lse_scale)
// where asked for. A row whose partials are all empty is the empty state (o =
// 0, lse = −inf).
template <int D, typename T>
__device__ __forceinline__ void merge_write_row(void* out, RowStrides out_rows, float* lse, RowStrides lse_rows,
                                                float lse_scale, int req, int head, const WarpMerge<D>& w) {
  using Tr = MergeTraits<D>;
  const int lane = threadIdx.x % 32;
  const float inv_l = w.state.inv_l();
  T* row = static_cast<T*>(out) + out_rows.at(req, head);
#pragma unroll
  for (int a = 0; a < Tr::kAccesses; ++a) {
    std::uint32_t packed[Tr::kVec / 2];
#pragma unroll
    for (int k = 0; k < Tr::kVec / 2; ++k) packed[k] = pack2<T>(w.acc[a][2 * k] * inv_l, w.acc[a][2 * k + 1] * inv_l);
    T* at = row + (32 * a + lane) * Tr::kVec;
    if constexpr (Tr::kVec == 4)
      *reinterpret_cast<uint2*>(at) = make_uint2(packed[0], packed[1]);
    else
      *reinterpret_cast<std::uint32_t*>(at) = packed[0];
  }
  if (lane == 0 && lse != nullptr) lse[lse_rows.at(req, head)] = w.state.lse() * lse_scale;
}

}  // namespace codec::cuda
