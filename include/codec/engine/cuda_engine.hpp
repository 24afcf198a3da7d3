#pragma once
// CUDA engine: runs a Plan on a GPU (docs/DESIGN.md §4-§5). Kernels launched on
// one stream: where the plan has wide blocks, the wide partial attention of
// tasks of up to kCudaMaxWideRows rows (one block per SM; sm_90a, head_dim
// 64 or 128); partial attention (PAC), persistent over the plan's blocks; then the
// merge of each row's partial states (POR). On sm_90 each is a programmatic
// dependent launch of the one before (PAC's blocks take the SMs the wide
// blocks leave; the merge starts during PAC's last tasks and waits on the
// device for PAC's results, and PAC for the wide kernel's); captured in a
// graph, the kernels are joined by programmatic edges.
//
// Usage, once per plan (e.g. per decode step):
//   std::size_t bytes = cuda_workspace_bytes(plan);      // cudaMalloc that much
//   cuda_upload_plan(plan, workspace, stream);           // one async copy
// then for every layer (or once, inside a CUDA graph that is replayed):
//   run_cuda(plan, kv, io, workspace, stream);
// run_cuda allocates nothing and never synchronises the host, so it can be
// captured in a CUDA graph; the plan uploaded into the workspace is reused.
// Plans packed at one capacity (cuda_plan_capacity) share a workspace layout:
// upload a new one (CudaPlanStaging) and replay the graph, no re-capture.
//
// This header needs no CUDA headers: CudaStream is cudaStream_t. A build
// without the CUDA engine has every function below too: cuda_device_count()
// is 0, cuda_built_architectures() "", the workspace sizes are computed, and
// everything else throws codec::Error saying the build has no CUDA engine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/core/dtype.hpp"
#include "codec/core/heads.hpp"
#include "codec/engine/attention_io.hpp"
#include "codec/forest/page_copy.hpp"
#include "codec/forest/page_table.hpp"
#include "codec/plan/plan.hpp"
#include "codec/plan/planner.hpp"

struct CUstream_st;  // the CUDA runtime's stream type (cudaStream_t is CUstream_st*)

namespace codec {

using CudaStream = CUstream_st*;  // nullptr is the legacy default stream

// Rows one PAC task holds: 4 warps × one 16-row m16n8k16 tile each.
inline constexpr int kCudaMaxTileRows = 64;
// Rows one wide task holds (the wide kernel: sm_90a, head_dim 64 or 128, one
// block per SM of two consumer warpgroups of 64 rows; kernels/pac_wide.cuh).
inline constexpr int kCudaMaxWideRows = 128;
// The head dims the wide kernel is built for (kernel_traits.cuh, WideTraits).
constexpr bool cuda_wide_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }
// Fewest rows a wide task is given (PlannerOptions::wide_min_rows): on the
// H200 (ab46884; docs/DESIGN_NOTES.md, Planner 13) nodes of 128 rows a kv
// head ran 5-9% faster as wide tasks
// (long, batch:32) and of 256 or more 12-21% (batch:64, sysprompt:512, dense
// documents), but loogle:8's documents of 68-76 rows, memory-bound, whose two
// 34-38-row tasks share their KV through L2, ran 4.5% slower.
inline constexpr int kCudaWideMinRows = 96;
// Fewest tokens a node must have for wide tasks (wide_min_tokens): depth:6's
// and shape:5's roots of 1,024 tokens and 100-128 rows ran 2-4% slower wide
// (a few tiles a task; the wide blocks' phase before the blocks'), sysprompt:64's
// prompt of 4,096 and 256 rows 2.3% faster (125c65a).
inline constexpr int kCudaWideMinTokens = 2048;
// Most rows a kv head a masked node may have for wide tasks
// (wide_max_masked_rows; 0: any). At head_dim 64 a prefill chunk's own
// node, causal, ran slower on the wide kernel than on the PAC kernel (H100;
// docs/DESIGN_NOTES.md, Planner 13; not yet profiled): 4,096 rows
// (llama3.2-1b, shape:DT --q-len 1024) 1.26-1.39×, 65,536 (gpt-oss-20b,
// --q-len 8192) 1.31×, balanced or not; while unmasked shared nodes ran
// faster wide at every size tried, 256-2,048 rows 18-23% (batch:64 and
// sysprompt:512 decoding) and 4,096-16,384 rows 8-28% (sysprompt:512 at 2
// and 8 query tokens, gpt-oss-20b's with sinks, batch:64 at 2).
constexpr int cuda_wide_max_masked_rows(int head_dim) { return head_dim == 64 ? 2048 : 0; }
// Most KV tokens of a wide task's chunk (wide_max_chunk_tokens) where the
// model prices the cut plan alike: on an H100 under roofline prices, batch:64
// at 8 query tokens ran its 120k-token root unsplit in 3.73 ms and cut into
// 2, 4, 8 and 16 chunks in 2.22, 1.95, 1.96 and 2.11 ms, while ratio:0.1 at 8
// tokens ran its 77k-token root in 2 chunks of 38k at speed
// (docs/DESIGN_NOTES.md, Planner 13).
inline constexpr int kCudaWideMaxChunkTokens = 65536;
// Most tokens of a request's private tail that its wide parent takes in
// (PlannerOptions::wide_tail_tokens): each tail token costs the wide task a
// token of every row's scores, so tails stay short; a system prompt's
// requests of 1-16 new tokens (sysprompt:B) fit.
inline constexpr int kCudaWideTailTokens = 16;
// The price of PAC tasks beside the wide kernel (PlannerOptions::
// beside_wide_price). With the wide grid profiled on 89ca733's kernel, 0.8
// predicted the plans measured (69ee6f8) within 1% on batch:32 (88 wide tasks,
// 44 SMs streaming the leaves beside them: 182.5 µs, measured 184) and 3.5%
// on batch:64 (362 against 350), and picked them, where 1 fills every SM
// with wide tasks, plans that ran 1.089× and 1.021× slower. Since 0d0804c's
// mma.sync tile step a small task's block streams faster where few blocks
// stream (tile/attend_mma.cuh), and 0.6 moves batch:64 to 96 wide tasks with
// the leaves on the other 36 SMs from the start: 0.929× (fp16 0.939×) of
// 0.8's plan, which the faster leaves had made 1.026× slower; long's plan
// moves too, 1.007× (fp16 0.993-0.999×) (a9a33b9;
// docs/DESIGN_NOTES.md, Planner 13). Batches of several query tokens a
// request take 1 instead (the planner's rule, measured there).
inline constexpr double kCudaBesideWidePrice = 0.6;

// KV tokens a PAC task streams per tile (PacTraits::kTileTokens): the
// planner prices a task by its whole tiles (PlannerOptions::price_tile_tokens).
constexpr int cuda_pac_tile_tokens(int head_dim) { return head_dim == 256 ? 32 : 64; }

// PAC blocks an SM holds at least: the kernel's launch bounds cap its
// registers for this many (128 each at head_dim 64, whose smaller tiles let 4
// blocks share an SM; 255 otherwise). cuda_device_info asks the device for the
// real count; plans made without a GPU (codec plan --target h200) use this.
constexpr int cuda_pac_min_blocks_per_sm(int head_dim) { return head_dim == 64 ? 4 : 2; }
static_assert(cuda_pac_min_blocks_per_sm(128) == h200::kBlocksPerSm, "the H200 roofline's block count is the kernel's");

// A PAC block runs up to `tasks` of its consecutive tasks side by side, one per
// warp, when each has at most `rows` rows and `tokens` KV tokens (a pack,
// kernels/pac.cuh); a lone such task runs on all 4 warps.
struct CudaPackLimits {
  int tasks;
  int rows;
  int tokens;
};
constexpr CudaPackLimits cuda_pac_pack_limits(int head_dim) { return {head_dim == 256 ? 2 : 4, 16, 512}; }

// Number of CUDA devices; 0 when there is none or no usable driver. Never throws.
int cuda_device_count() noexcept;

struct CudaDeviceInfo {
  int device = 0;         // the current device
  std::string name;
  int compute_capability = 0;  // e.g. 90
  int sm_count = 0;
  int blocks_per_sm = 0;  // resident PAC blocks per SM for the head_dim and dtype asked for
  // Whether the wide kernel runs here for that head_dim and dtype: an sm_90
  // device, a build with sm_90a code, a head_dim it is built for
  // (cuda_wide_head_dim), and as many PAC blocks an SM as the planner's
  // model of a wide block assumes (cuda_pac_min_blocks_per_sm).
  bool wide = false;
};
// Throws codec::Error for an unsupported head_dim or dtype, for a device this
// build has no kernel image for (naming the device's architecture and the
// build's, CODEC_CUDA_ARCHITECTURES), or on a CUDA error.
CudaDeviceInfo cuda_device_info(const HeadConfig& heads, DType dtype);

// The CUDA architectures this library's kernels were built for, as CMake's
// CMAKE_CUDA_ARCHITECTURES names them (e.g. "80-real,90a-real").
const char* cuda_built_architectures();

// The name of CUDA device `device` ("NVIDIA H200").
std::string cuda_device_name(int device);

// Makes CUDA device `device` current for its scope (a caller's framework may
// have another one current) and the one before current again after it.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device);
  ~CudaDeviceScope();
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  int previous_ = -1;  // the device to restore, −1: none
};

// Planner options for a GPU of `sm_count` SMs that holds `blocks_per_sm` PAC
// blocks each, and runs the wide kernel where `wide` (CudaDeviceInfo::wide):
// num_blocks = SMs × blocks per SM (e.g. 132 × 2 = 264 on an H200 at
// head_dim 128), so the plan's blocks are the persistent grid; max_tile_rows
// = kCudaMaxTileRows; price_tile_tokens = the PAC kernel's KV tile; where
// `wide`, wide_tile_rows = kCudaMaxWideRows, wide_span = blocks per SM,
// wide_min_rows = kCudaWideMinRows, wide_min_tokens = kCudaWideMinTokens,
// wide_max_masked_rows = cuda_wide_max_masked_rows(head_dim),
// wide_max_chunk_tokens = kCudaWideMaxChunkTokens,
// wide_tail_tokens = kCudaWideTailTokens and beside_wide_price =
// kCudaBesideWidePrice, else no wide tasks; chunk_align =
// 16, one k16 step of the P·V mma, the kernel's unit of work per warp: finer
// chunk boundaries would leave partly masked mma steps inside a chunk, coarser
// ones (the 64-token tile) would cap a short shared node's splits (a 200-token
// node can take 13 chunks at 16, only 4 at 64). Host code: `codec plan
// --target h200` plans for an H200 with it on a machine without one.
inline PlannerOptions cuda_planner_options(const HeadConfig& heads, int sm_count, int blocks_per_sm, bool wide) {
  PlannerOptions options;
  options.num_blocks = sm_count * blocks_per_sm;
  options.max_tile_rows = kCudaMaxTileRows;
  options.price_tile_tokens = cuda_pac_tile_tokens(heads.head_dim);
  if (wide) {
    options.wide_tile_rows = kCudaMaxWideRows;
    options.wide_span = blocks_per_sm;
    options.wide_min_rows = kCudaWideMinRows;
    options.wide_min_tokens = kCudaWideMinTokens;
    options.wide_max_masked_rows = cuda_wide_max_masked_rows(heads.head_dim);
    options.wide_max_chunk_tokens = kCudaWideMaxChunkTokens;
    options.wide_tail_tokens = kCudaWideTailTokens;
    options.beside_wide_price = kCudaBesideWidePrice;
  }
  options.chunk_align = 16;
  return options;
}
// The same for the current device (cuda_device_info).
PlannerOptions cuda_planner_options(const HeadConfig& heads, DType dtype);

// Device workspace of a plan: the packed plan (Plan::bytes(), padded to 256
// bytes), then Plan::workspace() (fp32 partial o [slots, D], fp32 lse [slots]).
std::size_t cuda_workspace_bytes(const Plan& plan);
// The same for every plan packed at `capacity`.
std::size_t cuda_workspace_bytes(const PlanCapacity& capacity, int head_dim);

// The capacity with the most partial slots whose workspace fits `bytes`, for
// batches of at most max_requests requests over at most max_page_entries
// page-table entries (and the query tokens and mask bytes of `queries`),
// planned with `options` (its num_blocks and max_tile_rows). Throws when not
// even one slot fits, naming the bytes the fixed part alone takes.
PlanCapacity cuda_plan_capacity(std::size_t bytes, int max_requests, std::int64_t max_page_entries,
                                const HeadConfig& heads, const PlannerOptions& options,
                                const QueryCapacity& queries = {});

// One cudaMemcpyAsync of plan.bytes() into the head of `workspace` (device
// memory, 256-byte aligned as cudaMalloc returns, at least
// cuda_workspace_bytes(plan) bytes). The copy is from pageable memory, so the
// call waits for the stream's earlier work; the host Plan must stay alive,
// unchanged, until the copy has completed. Call it outside graph capture.
void cuda_upload_plan(const Plan& plan, std::span<std::byte> workspace, CudaStream stream);

// Uploads successive plans without waiting for the GPU: each plan is copied
// into pinned host memory and from there by an async copy on the stream, so
// the host may plan the next step while the GPU runs this one. Two staging
// buffers take turns; an upload waits only while the copy two uploads back is
// still pending. Outside graph capture, one device per instance.
class CudaPlanStaging {
 public:
  CudaPlanStaging();
  ~CudaPlanStaging();
  CudaPlanStaging(const CudaPlanStaging&) = delete;
  CudaPlanStaging& operator=(const CudaPlanStaging&) = delete;
  void upload(const Plan& plan, std::span<std::byte> workspace, CudaStream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What run_cuda launches: every kernel of the plan (wide PAC where it has wide
// blocks, PAC, the merge), or partial attention alone (wide PAC and PAC), which
// leaves the rows PAC does not write (those with other than one partial)
// unwritten: `codec bench` times both to report the merge's share of a run.
enum class CudaStages { all, partial_attention };

// The kernels run_cuda launches for `plan`, in this order. The wide kernel
// where the plan has wide blocks. The PAC kernel where it has other tasks, or
// no wide blocks, or a capacity (a plan uploaded later in its place may have
// other tasks); without it the merge waits on the wide kernel. The merge
// where some row has other than one partial (always at a capacity) and
// `stages` is all.
struct CudaLaunches {
  bool wide = false;
  bool pac = false;
  bool merge = false;
};
CudaLaunches cuda_launches(const Plan& plan, CudaStages stages = CudaStages::all);

// Attention of every (request, qo head) row of the plan: the kernels of
// cuda_launches (wide PAC, PAC, the merge of rows with more than one partial). `plan` must be the one uploaded into
// `workspace` (kernels read the device copy; the host Plan supplies sizes and
// is validated against kv and io), or for a plan packed at a capacity any plan
// at the same capacity. kv, q, out and lse are device pointers; kv's dtype
// (fp16/bf16), head_dim, num_kv_heads and page_size, and q's and out's dtype
// and shape must match the plan (AttentionIO); k, v, q, out and the byte size
// of every KV, q and out stride must be 16-byte aligned (cp.async copies).
// Validation is on the host and O(1): it reads the facts the Plan derived from
// its arrays when it was built (Plan::extent), not the task and page lists.
void run_cuda(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace,
              CudaStream stream, CudaStages stages = CudaStages::all);

// merge_states_cpu (cpu_engine.hpp) on device tensors, on `stream`.
void cuda_merge_states(const QueryRows& o_a, const LseRows& lse_a, const QueryRows& o_b, const LseRows& lse_b,
                       const OutputRows& out, const LseRows& lse_out, LseBase base, CudaStream stream);

// copy_pages_cpu (cpu_engine.hpp) on a device pool, on `stream`: the copies
// travel in the launches' parameters, so nothing is allocated or waited for.
void cuda_copy_pages(const PagedKV& kv, std::span<const PageCopy> copies, CudaStream stream);

}  // namespace codec
