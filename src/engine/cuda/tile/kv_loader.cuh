#pragma once
// The KV side of a PAC task: a node chunk's K and V tiles streamed from the
// paged pool into the shared-memory stages through cp.async, kStages deep.
#include <cstdint>
#include <type_traits>

#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/primitives/ptx.cuh"

namespace codec::cuda {

// The paged pool: element (page, slot, kv head, d) of K (or V) is at
// page·stride_page + slot·stride_token + head·stride_head + d from k (or v);
// strides in elements, each a multiple of 16 bytes. The same token offset in
// bytes is (page·page_units + slot·token_units)·unit_bytes, where unit_bytes is
// the largest power of two that divides both strides in bytes: 32 bits reach
// the whole pool (make_kv_pool in cuda_engine.cu refuses one they do not), and
// PAC's copies pass those around the warp (copy_rows).
struct KvPool {
  const void* k;
  const void* v;
  std::int64_t stride_page;  // elements
  std::int64_t stride_token;
  std::int64_t stride_head;
  std::uint32_t page_units;
  std::uint32_t token_units;
  std::uint32_t unit_bytes;
};

// Token t of a node lies in page pages[t / page_size] at slot t % page_size.
// Page sizes are powers of two in practice (16 in every benchmark): a shift and
// a mask then replace the run-time integer division, about 20 dependent
// instructions in each lane's lookup of its token (KvLoader::lookup). Other
// page sizes (the tests use 3, 5 and 7) keep the division; the branch is
// uniform across the grid.
struct PageGeometry {
  int size;
  int shift;  // log2(size), or −1 when size is not a power of two
  __device__ explicit PageGeometry(int page_size) : size(page_size), shift(-1) {
    if ((page_size & (page_size - 1)) == 0)  // page_size ≥ 1 (validated): a power of two
      for (shift = 0; (1 << shift) < page_size; ++shift) {
      }
  }
  __device__ __forceinline__ int page(int t) const { return shift >= 0 ? t >> shift : t / size; }
};

// One task's loader: kLanes threads (the block, or one warp of a pack) copy
// kStepTokens tokens per tile, into rows row0 .. row0 + kStepTokens − 1 of
// each stage (a block's task: the whole stage; warp w of a pack: its 16
// tokens from 16w). Token t of the chunk lives in page pages[t / page_size]
// at slot t % page_size (PageGeometry). kLanes is a multiple of kChunks, so a
// thread always copies the same 16-byte chunk c of its tokens: rows lane /
// kChunks + k · kTokenStride of the tile. The kChunks threads of a token
// share its address, so each warp looks up its (at most 32) tokens once, one
// per lane (lookup), and hands the offsets out by shuffle (copy): ~35 integer
// instructions of page arithmetic per warp and tile instead of per token.
//
// A tile's page ids are looked up one refill before they are copied, so that
// the load's latency (an L1 or L2 round trip per tile) hides behind a tile of
// compute instead of stalling the copy. cp.async groups: start() commits
// kStages − 1 groups (tiles 0 .. kStages − 2; whatever the threads issued
// before, Q, rides in the first), and every refill() one more.
//
// The wide kernel's producer (kernels/pac_wide.cuh) uses the same lookup and
// copies with its own tiles (kTileRows tokens) and stages, through
// copy_rows: K and V land in buffers of their own, each released separately.
//
// KV: the cache's element, T (stages of T in the swizzled tile layout) or
// std::uint8_t for an fp8 cache (stages of its bytes, [kTileRows][D] in
// raw_offset's layout, which PAC reads as they are or converts: tile/fp8.cuh).
template <int D, typename T, int kLanes = PacTraits<D, T>::kThreads, int kStepTokens = PacTraits<D, T>::kTileTokens,
          int kTileRows = PacTraits<D, T>::kTileTokens, typename KV = T>
class KvLoader {
  using Tr = PacTraits<D, T>;
  static constexpr bool kRaw = !std::is_same_v<KV, T>;
  static constexpr int kChunks = D * int(sizeof(KV)) / 16;      // 16-byte cp.async chunks per row
  static constexpr int kTokenStride = kLanes / kChunks;         // tokens the kLanes threads copy at once
  static constexpr int kTokensPerThread = kStepTokens / kTokenStride;
  static constexpr int kWarpTokens = 32 / kChunks;              // tokens a warp copies per step k
  static_assert(std::is_same_v<KV, T> || std::is_same_v<KV, std::uint8_t>, "KV is T, or the bytes of an fp8 cache");
  static_assert(kLanes % 32 == 0 && kLanes % kChunks == 0,
                "a thread copies the same 16-byte chunk of each of its tokens");
  static_assert(kStepTokens % kTokenStride == 0, "every thread copies the same number of KV chunks");
  static_assert(kTokensPerThread * kWarpTokens <= 32, "one lane per token a warp copies");
  static_assert(kStepTokens <= kTileRows, "a step fits in a tile");

 public:
  // lane: this thread's index among the kLanes; row0: the stage row of the
  // step's first token.
  __device__ __forceinline__ KvLoader(const KvPool& pool, const Task& task, const std::int32_t* pages,
                                      PageGeometry geo, int num_tiles, KV* stages, int lane, int row0)
      : pool_(pool), pages_(pages), geo_(geo), kv_begin_(task.kv_begin), kv_end_(task.kv_end),
        num_tiles_(num_tiles), lane_(lane), row0_(row0), stages_(stages) {
    const std::int64_t head_offset =
        std::int64_t(task.kv_head) * pool.stride_head + 16 / int(sizeof(KV)) * (lane % kChunks);
    k_base_ = reinterpret_cast<const char*>(static_cast<const KV*>(pool.k) + head_offset);
    v_base_ = reinterpret_cast<const char*>(static_cast<const KV*>(pool.v) + head_offset);
  }

  // This lane's token of a tile: its page id, its slot in the page, and
  // whether it exists (t < kv_end). A missing token keeps page 0 and slot 0, a
  // valid address, and copy has cp.async write zeros for it.
  struct LaneToken {
    std::int32_t page;
    std::int32_t slot;
    bool valid;
  };
  // The tokens of tiles 0 .. kStages − 1, looked up for the prologue.
  struct Prologue {
    LaneToken first[Tr::kStages - 1];
    LaneToken ahead;  // the first refill's
  };

  // Prologue, first half: the page ids of tiles 0 .. kStages − 1. On a cold
  // plan each is a DRAM round trip, and a task with few tiles is mostly this
  // chain, so they are issued before anything waits.
  __device__ __forceinline__ void look_up_first(Prologue& pro) const {
#pragma unroll
    for (int t = 0; t < Tr::kStages - 1; ++t) pro.first[t] = lookup(t);
    pro.ahead = lookup(Tr::kStages - 1);
  }
  // Prologue, second half: tiles 0 .. kStages − 2 in flight.
  __device__ __forceinline__ void start(const Prologue& pro) const {
#pragma unroll
    for (int t = 0; t < Tr::kStages - 1; ++t) {
      if (t < num_tiles_) copy(t, pro.first[t]);
      cp_async_commit();
    }
  }
  // Main loop, tile t, once every thread of the kLanes is done with tile t −
  // 1: tile t + kStages − 1 (its tokens in `ahead`) into the stage tile t − 1
  // used, then `ahead` becomes the next refill's. The group is committed even
  // when empty, so that the count stays in step with t: after refill(t),
  // waiting until at most kStages − 1 groups are pending completes tiles 0 ..
  // t (and Q).
  __device__ __forceinline__ void refill(int t, LaneToken& ahead) const {
    if (t + Tr::kStages - 1 < num_tiles_) copy(t + Tr::kStages - 1, ahead);
    cp_async_commit();
    ahead = lookup(t + Tr::kStages);
  }
  // Tile t's stage: its K [kTileTokens][D], then its V.
  __device__ __forceinline__ KV* stage(int t) const { return stages_ + (t % Tr::kStages) * 2 * Tr::kTileTokens * D; }

  // This lane's token of step `tile` (kStepTokens tokens from the chunk's start).
  __device__ __forceinline__ LaneToken lookup(int tile) const {
    const int t = kv_begin_ + tile * kStepTokens + step_token();
    if (tile >= num_tiles_ || !has_token() || t >= kv_end_) return LaneToken{0, 0, false};
    const int page = geo_.page(t);
    return LaneToken{pages_[page], t - page * geo_.size, true};
  }
  // The same for step `tile` of tokens listed by page and slot, tokens[begin
  // .. end) (a wide task's tails, PlanView::tail_tokens).
  __device__ __forceinline__ LaneToken lookup_listed(const TokenRef* tokens, int begin, int end, int tile) const {
    const int i = begin + tile * kStepTokens + step_token();
    if (!has_token() || i >= end) return LaneToken{0, 0, false};
    const TokenRef ref = tokens[i];
    return LaneToken{ref.page, ref.slot, true};
  }
  // This lane's share of a step's K (kK) and V (kV) rows, the tokens the
  // warp looked up (`token`, one per lane), into the [kTileRows][D] tiles sk
  // and sv: rows row0 + lane / kChunks + k · kTokenStride. Missing tokens
  // are written as zeros. kUnits: each token's offset goes round the warp as
  // 32-bit units (KvPool), one shuffle and one wide multiply-add an address,
  // where a 64-bit byte offset takes two shuffles and two adds: PAC's tile
  // step is a chain of latencies (4bcd2d4: batch:64 0.978×,
  // loogle:8 and long 0.99×). The wide kernel's producer keeps byte
  // offsets: with units it ran sysprompt:512 1.039× slower (4bcd2d4).
  template <bool kK, bool kV, bool kUnits = true>
  __device__ __forceinline__ void copy_rows(LaneToken token, KV* sk, KV* sv) const {
    const int lane = lane_ % 32, c = lane_ % kChunks;
    using Offset = std::conditional_t<kUnits, std::uint32_t, std::int64_t>;
    Offset lane_offset;
    if constexpr (kUnits)
      lane_offset = std::uint32_t(token.page) * pool_.page_units + std::uint32_t(token.slot) * pool_.token_units;
    else
      lane_offset = (std::int64_t(token.page) * pool_.stride_page + std::int64_t(token.slot) * pool_.stride_token) *
                    std::int64_t(sizeof(KV));
    const unsigned valid_lanes = __ballot_sync(0xffffffffu, token.valid);
#pragma unroll
    for (int k = 0; k < kTokensPerThread; ++k) {
      const int j = row0_ + lane_ / kChunks + k * kTokenStride;
      const int src_lane = k * kWarpTokens + lane / kChunks;
      const Offset shared = __shfl_sync(0xffffffffu, lane_offset, src_lane);
      const auto offset = [&] {
        if constexpr (kUnits)
          return std::uint64_t(shared) * pool_.unit_bytes;
        else
          return shared;
      }();
      const bool valid = (valid_lanes >> src_lane) & 1u;
      const int at = kRaw ? raw_offset<D>(j, c) : tile_offset<kTileRows>(j, c);
      if constexpr (kK) cp_async_16(sk + at, k_base_ + offset, valid);
      if constexpr (kV) cp_async_16(sv + at, v_base_ + offset, valid);
    }
  }

 private:
  // Which token of a step this lane looks up (warp, then lane): every lane
  // of the first kTokensPerThread · kWarpTokens of its warp has one.
  __device__ __forceinline__ bool has_token() const { return lane_ % 32 / kWarpTokens < kTokensPerThread; }
  __device__ __forceinline__ int step_token() const {
    const int lane = lane_ % 32;
    return lane_ / 32 * kWarpTokens + lane % kWarpTokens + lane / kWarpTokens * kTokenStride;
  }

  // K and V of a step share each token's address: one shuffle for both.
  __device__ __forceinline__ void copy(int tile, LaneToken token) const {
    KV* sk = stage(tile);
    copy_rows<true, true>(token, sk, sk + Tr::kTileTokens * D);
  }

  const KvPool& pool_;  // in the kernel's parameters
  const std::int32_t* pages_;
  PageGeometry geo_;
  int kv_begin_, kv_end_, num_tiles_, lane_, row0_;
  KV* stages_;
  const char* k_base_;
  const char* v_base_;
};

}  // namespace codec::cuda
