#pragma once
// Compile-time configuration of the CUDA kernels, one traits struct per
// (head_dim, dtype): tile sizes, pipeline depth, shared-memory layout, with
// static_asserts that name the limit a configuration would break.
#include <cuda_fp16.h>

#include <type_traits>

#include "codec/engine/cuda_engine.hpp"  // cuda_pac_min_blocks_per_sm, cuda_pac_pack_limits, cuda_pac_tile_tokens, kCudaMaxWideRows

namespace codec::cuda {

// What a run asks of the attention kernels beyond (head_dim, dtype), each a
// compile-time switch so that an instance carries only the code its runs
// need (with_variant, below, picks one per run). A type, not a value:
// nvcc's kernel stubs take no class-type template arguments.
template <bool kFp8, bool kMasked, bool kSoftCap>
struct Variant {
  static constexpr bool fp8 = kFp8;            // an fp8 cache: PacSmem, tile/fp8.cuh, per-head scales
  static constexpr bool masked = kMasked;      // a plan with masked tasks (tile/row_masks.cuh)
  static constexpr bool soft_cap = kSoftCap;   // HeadConfig::logits_soft_cap > 0 (tile/softmax.cuh, ScoreMod)
};

// A run's switches beyond its configuration's (head_dim, dtype, cache),
// chosen by the engine (cuda_engine.cu, run_cuda).
struct RunVariant {
  bool masked;    // the plan has masked tasks, or may have at a capacity
  bool soft_cap;  // HeadConfig::logits_soft_cap > 0
};

// The one place a run's switches become an instance:
// f(Variant<kFp8, masked, soft_cap>{}).
template <bool kFp8, typename F>
void with_variant(RunVariant run, F&& f) {
  if (run.masked) {
    if (run.soft_cap) f(Variant<kFp8, true, true>{});
    else f(Variant<kFp8, true, false>{});
  } else {
    if (run.soft_cap) f(Variant<kFp8, false, true>{});
    else f(Variant<kFp8, false, false>{});
  }
}

// The element the tensor cores see: q's type T, or fp16 under an fp8 cache.
// Every e4m3 and e5m2 value is an fp16 one, reached in one instruction a
// pair (F2FP.F16.E4M3.UNPACK_B and E5M2), where bf16 goes through fp32 in
// four; a bf16 query takes an fp16 copy scaled to fit it (tile/fp8.cuh,
// half_queries).
template <typename T, typename V>
using MmaElem = std::conditional_t<V::fp8, __half, T>;

// Partial attention (kernels/pac.cuh). A block of 4 warps runs one task at a time: up
// to 64 query rows (one m16 row tile per warp) against the chunk's KV tokens,
// streamed through shared memory in tiles of kTileTokens tokens, kStages deep.
//
// Tile and stage choice. Decode is memory-bound, so the pipeline must keep
// enough bytes in flight. Little's law: an H200 SM's share of the ~4.2 TB/s a
// device copy reaches is 4.2 TB/s / 132 ≈ 32 B/ns, and the latency of a loaded
// HBM3e system is 1.5–3 µs, so an SM needs ~50–100 KB outstanding. The main loop
// (kernels/pac.cuh) refills a stage as soon as every warp is done with it, before it
// waits for the next tile, so a block has all kStages tiles in flight while it
// waits and kStages − 1 while it computes:
//   D = 64:  64-token tiles of 2 × 8 KiB,  3 stages:  8 + 48 = 56 KiB smem;
//            48 KiB in flight per block; 128 regs (the cap for 4 blocks) and 57
//            KiB (with the 1 KiB the system reserves per block) give 4 blocks per
//            SM → ~190 KiB per SM
//   D = 128: 64-token tiles of 2 × 16 KiB, 3 stages: 16 + 96 = 112 KiB smem;
//            96 KiB in flight per block, 2 blocks per SM (2 × 113 = 226 KiB of
//            228) → ~190 KiB per SM. Two stages, 80 KiB, refilled after the
//            wait, keep one 32 KiB tile in flight per block, 64 KiB per SM: at
//            the 2.98 TB/s they reached on flat:64 that implies a loaded latency
//            of 64 KiB / 22.6 B/ns ≈ 2.9 µs, i.e. latency-bound.
//   D = 256: 32-token tiles of 2 × 16 KiB, 2 stages: 32 + 64 = 96 KiB smem;
//            64 KiB in flight per block, 2 blocks per SM → 128 KiB per SM. A third
//            stage would need 128 KiB, one block per SM.
// D = 256 uses 32-token tiles because 64 would need 160 KiB, one block per SM.
// Registers do not bind at 2 blocks per SM (255 × 128 × 2 < 64 Ki); at D = 64
// they must stay ≤ 128 per thread for 4 blocks (launch bounds in kernels/pac.cuh).
template <int D, typename T>
struct PacTraits {
  static constexpr int kHeadDim = D;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsPerWarp = 16;                   // M of mma.m16n8k16
  static constexpr int kMaxRows = kWarps * kRowsPerWarp;    // rows one task may hold
  static constexpr int kTokenStep = 16;                     // K of the P·V mma: a warp's unit of tokens
  static constexpr int kTileTokens = cuda_pac_tile_tokens(D);
  static constexpr int kMaxSplits = kTileTokens / kTokenStep;  // most warps one row tile's tokens are split over
  static constexpr int kChunks = D * int(sizeof(T)) / 16;      // 16-byte cp.async chunks per row
  static constexpr int kTileBytes = kTileTokens * D * int(sizeof(T));  // K (or V) of one stage
  static constexpr int kStages = D == 256 ? 2 : 3;
  static constexpr int kMinBlocksPerSM = cuda_pac_min_blocks_per_sm(D);  // __launch_bounds__
  // Tasks with at least this many rows run on wgmma where the build has it
  // (sm_90a, primitives/wgmma.cuh): from 2 row tiles on, splitting a tile's tokens over
  // warps (mma.sync) reads K and V from shared memory 2-4 times per tile.
  static constexpr int kWgmmaMinRows = 17;
  // Shared memory: Q [kMaxRows][D], then kStages × (K, V) [kTileTokens][D], each
  // as D / 64 column blocks of 128-byte rows XOR-swizzled by 16-byte chunk
  // (tile_offset below). The epilogue reuses it all as fp32 staging.
  static constexpr int kQBytes = kMaxRows * D * int(sizeof(T));
  static constexpr int kKVBytes = kStages * 2 * kTileBytes;
  static constexpr int kSmemBytes = kQBytes + kKVBytes;
  // Epilogue staging: each warp's normalised o [16][D] and lse [16], fp32, and a
  // single-partial flag per row. Rows
  // are padded by 8 floats so that the 8 rows one float2 store touches start
  // 8 banks apart (a half-warp then covers all 32 banks).
  static constexpr int kStagingStride = D + 8;
  static constexpr int kStagingBytes = (kMaxRows * kStagingStride + kMaxRows) * int(sizeof(float)) + kMaxRows;
  // Packs (kernels/pac.cuh): up to kMaxPack consecutive tasks of a block, each
  // of at most kRowsPerWarp rows and kPackMaxTokens tokens, run side by side,
  // one warp each; warp w streams its task through tokens [16w, 16w + 16) of
  // every stage, so a full pack keeps as many bytes in flight as one task on
  // the whole block.
  static constexpr int kMaxPack = cuda_pac_pack_limits(D).tasks;
  static constexpr int kPackMaxTokens = cuda_pac_pack_limits(D).tokens;

  static_assert(D == 64 || D == 128 || D == 256, "head_dim must be 64, 128 or 256");
  static_assert(sizeof(T) == 2, "tensor-core path is fp16 / bf16 only");
  static_assert(kChunks >= 8, "the swizzle permutes 8 chunks of 16 bytes per row: head_dim must be >= 64");
  static_assert(kTileTokens % kTokenStep == 0, "a tile must be whole 16-token mma steps");
  static_assert(kMaxPack <= kWarps && kMaxPack == kTileTokens / kTokenStep,
                "a pack runs one task per warp, each on its own 16 tokens of every stage");
  static_assert(cuda_pac_pack_limits(D).rows == kRowsPerWarp, "a packed task's rows are one warp's row tile");
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0 && kTileTokens * 128 % 1024 == 0,
                "every operand and column block must start on a 1024-byte boundary (wgmma's 128-byte swizzle)");
  static_assert(kThreads >= kMaxRows, "one thread loads each row's single-partial flag");
  static_assert(kStagingBytes <= kSmemBytes, "epilogue staging must fit in the Q + KV shared memory it reuses");
  static_assert(kStages >= 2, "the main loop overlaps a tile's copy with the previous tile's compute");
  static_assert(kMinBlocksPerSM * (kSmemBytes + 1024) <= 228 * 1024,
                "kMinBlocksPerSM PAC blocks must fit in an sm_90 SM (228 KiB, 1 KiB reserved per block)");
};

// A PAC block's shared memory: Q, then the KV stages. Under an fp8 cache
// (kFp8) the stages hold the cache's bytes, [kTileTokens][D] for K then V
// (a byte an element: half a 16-bit tile; raw_offset), and one tile of K and
// V in fp16 (MmaElem) sits between Q and the stages: a wgmma task's block
// converts each stage into it (tile/fp8.cuh), which wgmma reads as it reads
// a 16-bit stage, while the mma.sync path reads the stage's bytes itself
// (tile/attend_mma_fp8.cuh); the same tile first holds the task's query rows
// as copied, [rows][D] in q's type, before they go to Q in fp16. After the
// stages, one word a warp for the reduction that scales bf16 queries. D =
// 128: 16 + 32 + 3 × 16 = 96 KiB, two blocks an SM as at 16 bits, with the
// same tokens in flight.
template <int D, typename T, bool kFp8>
struct PacSmem {
  using Tr = PacTraits<D, T>;
  static constexpr int kRawTileBytes = Tr::kTileTokens * D;  // fp8 K (or V) of one stage
  static constexpr int kConvertedOffset = Tr::kQBytes;       // kFp8: the converted K, then V; or the copied Q
  static constexpr int kStagesOffset = Tr::kQBytes + (kFp8 ? 2 * Tr::kTileBytes : 0);
  static constexpr int kStageBytes = 2 * (kFp8 ? kRawTileBytes : Tr::kTileBytes);
  static constexpr int kScratchOffset = kStagesOffset + Tr::kStages * kStageBytes;  // kFp8: [kWarps] words
  static constexpr int kBytes = kScratchOffset + (kFp8 ? 4 * Tr::kWarps : 0);
  static_assert(!kFp8 || kBytes == Tr::kSmemBytes - Tr::kKVBytes / 2 + 2 * Tr::kTileBytes + 4 * Tr::kWarps,
                "the layout above");
  static_assert(Tr::kStagingBytes <= kBytes, "epilogue staging must fit in the shared memory it reuses");
  static_assert(!kFp8 || Tr::kQBytes <= 2 * Tr::kTileBytes, "the copied query rows fit in the converted tile");
  static_assert(kStagesOffset % 1024 == 0, "the stages start on a 1024-byte boundary");
  static_assert(Tr::kMinBlocksPerSM * (kBytes + 1024) <= 228 * 1024,
                "kMinBlocksPerSM PAC blocks must fit in an sm_90 SM (228 KiB, 1 KiB reserved per block)");
};

// Wide PAC (kernels/pac_wide.cuh, sm_90a, head_dim 64 or 128): one block per SM runs
// the plan's tasks of 65 to 128 rows (a wide block's: wide_indptr), the shape
// FlashAttention-3 gives prefill. Warpgroup 0 is the producer: it copies each
// task's query rows and KV tiles with cp.async into shared memory, running
// ahead across tasks. Warpgroups 1 and 2 are consumers, rows 0-63 and 64-127
// of the task, on wgmma, sharing every KV tile: each KV byte a tile brings
// in feeds 128 rows, twice what a 64-row task's does, which halves the
// shared node's L2 reads and the copies' instructions per FLOP.
//
// Sizing. 128-token tiles: an m64n128k16 Q·Kᵀ with both operands in shared
// memory reads 6 KiB per 64 tensor-core cycles (96 B/cycle of the 128 shared
// memory delivers); 64-token tiles read 4 KiB per 32 cycles, all of it, which
// held the warp-specialised kernel of 6f53ca0 to 384 TFLOP/s. K and V are
// separate buffers with barriers of their own: each is refilled as soon as
// its last reader is done (K after its Q·Kᵀ, V after its P·V). Three stages
// of each put a tile's K and V in flight about two tiles before they are
// needed; two stages left the copies about one tile ahead, and the wide tasks
// waited on them (89ca733: three stages 0.90-0.91× on batch:32,
// batch:64 and long, 0.96× on the dense shapes). A second Q buffer does not
// fit beside them (2 × 32 + 3 × 64 = 256 KiB), so the next task's rows load
// once this task's last Q·Kᵀ is done, during its last P·V and its epilogue.
// Per SM: 32 KiB of Q + 3 stages × (32 + 32) KiB of KV = 224 KiB of the 227 a
// block may have.
//
// Registers: 3 warpgroups of 168 (one block per SM: 64 Ki / 384); the
// producer gives back to 72, the consumers take 216 each (72 + 2 · 216 = 504
// = 3 · 168). A consumer holds O (64 fp32), S (64 fp32) and P (32 × 2 bf16)
// of its 64 rows, ~195 registers in all, and spills nothing at 216; Q·Kᵀ of
// tile t runs while P·V of tile t − 1 does. The producer needs more than 40
// (its copies' addresses). This split runs the wide workloads 2–5% faster
// than 56 / 224 (d6de97a) with the same instructions a tile
// within 1%; the one visible difference is that at 224 ptxas re-reads
// threadIdx.x (S2R) in every consumer step.
//
// Under an fp8 cache (kFp8) the ring holds fp16 (MmaElem) and two raw stages
// of the cache's bytes sit beside it: the producer copies each tile's bytes
// into a raw stage and, once they land, converts the previous tile into the
// ring (tile/fp8.cuh), one tile behind its copies. Two ring stages then fit:
// 32 KiB of Q + 2 × 64 KiB of ring + 2 × 32 KiB raw = 224 KiB, the copies
// running up to two tiles ahead of the ring as three ring stages let them at
// 16 bits. After the barriers, one word a consumer warp for the reduction
// that scales bf16 queries (convert_queries).
//
// Head dim 64: the same 128-row tasks and 128-token tiles, each half the
// bytes, so twice the stages keep as many bytes in flight as at head_dim 128
// (twice the tokens, each consumed in half the time): 16 KiB of Q + 6 × (16 +
// 16) KiB = 208 KiB (fp8: a ring of 5 beside the two raw stages, 16 + 160 +
// 32). The wide block's 64,512 registers already keep PAC blocks off its SM,
// as the planner's wide block (wide_span: the SM's PAC blocks) assumes; the
// last static_assert below keeps its shared memory saying so too.
template <int D, typename T, bool kFp8 = false>
struct WideTraits {
  static constexpr int kHeadDim = D;
  static constexpr int kWarpgroups = 3;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kConsumerRows = 64;                 // M of wgmma
  static constexpr int kMaxRows = 2 * kConsumerRows;       // rows one wide task may hold
  static constexpr int kTileTokens = 128;
  static constexpr int kStages = D == 64 ? (kFp8 ? 5 : 6) : (kFp8 ? 2 : 3);
  static constexpr int kRawStages = kFp8 ? 2 : 0;
  static constexpr int kQBuffers = 1;
  static constexpr int kProducerRegs = 72;
  static constexpr int kConsumerRegs = 216;
  static constexpr int kChunks = D * int(sizeof(T)) / 16;  // 16-byte cp.async chunks per row
  static constexpr int kQBytes = kMaxRows * D * int(sizeof(T));
  static constexpr int kTileBytes = kTileTokens * D * int(sizeof(T));  // K (or V) of one stage
  static constexpr int kRawTileBytes = kTileTokens * D;                 // kFp8: K (or V) of one raw stage
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBuffers * kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kTileBytes;
  static constexpr int kRawOffset = kVOffset + kStages * kTileBytes;  // kFp8: K then V of each raw stage
  static constexpr int kBarrierOffset = kRawOffset + kRawStages * 2 * kRawTileBytes;
  // q_full, q_empty per Q buffer; k_full, k_empty, v_full, v_empty per stage; raw_full per raw stage
  static constexpr int kBarriers = 2 * kQBuffers + 4 * kStages + kRawStages;
  static constexpr int kScratchOffset = kBarrierOffset + kBarriers * 8;  // kFp8: [2 × 4] words
  static constexpr int kSmemBytes = kScratchOffset + (kFp8 ? 4 * 8 : 0);
  // Arrivals that complete a phase: every producer thread's copies (full
  // barriers), or one lane of each consumer warp (empty barriers).
  static constexpr int kFullArrivals = 128;
  static constexpr int kEmptyArrivals = 2 * 4;

  static_assert(cuda_wide_head_dim(D), "the wide kernel is built for head_dim 64 and 128 (kernel_traits.cuh sizes it)");
  static_assert(sizeof(T) == 2, "q is fp16 or bf16, and so is the ring at 16 bits");
  static_assert(kMaxRows == kCudaMaxWideRows, "cuda_engine.hpp states the wide task's rows");
  static_assert(kProducerRegs + 2 * kConsumerRegs <= kWarpgroups * (65536 / kThreads / 8 * 8),
                "setmaxnreg may only move registers within the block's launch allocation");
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0 && kTileTokens * 128 % 1024 == 0,
                "every operand and column block must start on a 1024-byte boundary (wgmma's 128-byte swizzle)");
  static_assert(kRawTileBytes % 16 == 0 && kBarrierOffset % 8 == 0, "raw stages of 16-byte chunks, 8-byte barriers");
  static_assert(kSmemBytes <= 227 * 1024, "a block may have at most 227 KiB of shared memory on sm_90");
  static_assert(kSmemBytes + 1024 + PacSmem<D, T, kFp8>::kBytes + 1024 > 228 * 1024,
                "a wide block leaves no room for a PAC block beside it on its SM (the planner's wide_span)");
  static_assert(kStages >= 2, "a one-pass copy of tile t waits for V of tile t - kStages, released in the step "
                              "of tile t - kStages + 1, which with one stage is tile t's own");
};

// Element offset of 16-byte chunk `chunk` of row `row` in a [Rows][D] tile,
// stored as D / 64 column blocks of [Rows][64] (128-byte rows) with each row's
// chunks XOR-swizzled by row % 8. The 8 rows one ldmatrix phase reads then hit
// 8 different 16-byte bank groups, and each column block is the 128-byte
// swizzle layout wgmma reads (primitives/wgmma.cuh).
template <int Rows>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk >> 3) * (Rows * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in an fp8 stage, [Rows]
// [D] bytes with each row's chunks XOR-swizzled so that both of PAC's reads
// (tile/attend_mma_fp8.cuh) are free of bank conflicts: a quarter-warp's
// 16-byte loads of chunks 4j..4j+3 of two neighbouring rows, and ldmatrix's
// 8 rows of one chunk. D ≥ 128: the low three bits of the chunk by (row % 2)
// · 4 + row / 2 % 4, a bijection on eight rows; D = 64 (two rows a 128-byte
// line): by row / 2 % 4.
template <int D>
__device__ __forceinline__ int raw_offset(int row, int chunk) {
  const int swizzle = D == 64 ? (row >> 1) & 3 : ((row & 1) << 2) | ((row >> 1) & 3);
  return row * D + 16 * (chunk ^ swizzle);
}

// Merge (kernels/merge.cuh): 4 warps per block, 1, 2 or 4 of them per (request, qo
// head) row. A lane owns kVec consecutive floats of each 32·kVec-float slice of
// the row, so every warp-wide load is one contiguous, coalesced segment. A warp
// holds the o of kBatch partials at once (at most 32 registers per lane) and
// issues their loads together.
template <int D>
struct MergeTraits {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kVec = D / 32 < 4 ? D / 32 : 4;  // floats per lane per access: 2, 4, 4
  static constexpr int kAccesses = D / (32 * kVec);     // 1, 1, 2
  static constexpr int kBatch = 32 / (kVec * kAccesses) < 8 ? 32 / (kVec * kAccesses) : 8;  // 8, 8, 4
  static_assert(D % (32 * kVec) == 0 && kVec % 2 == 0, "a lane writes whole pairs of 16-bit outputs");
};

}  // namespace codec::cuda
