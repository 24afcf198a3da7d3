#pragma once
// One planner setup for every front end (the codec tool, the Python package,
// a C++ user): from where plans run, the attention they compute and the
// workspace they fill, the planner's options, its cost model and the
// workspace's bounds. The cost model is the table `codec profile` measured
// for the device and shape where one is found (cost_table_dirs), else the
// analytic roofline.
//
//   PlannerSetupArgs args;
//   args.target = PlanTarget::cuda;
//   args.shape = {32, 8, 128, 128, 0.f, DType::bf16, DType::bf16, 16};
//   args.workspace.bytes = 128 << 20;
//   const PlannerSetup setup = make_planner_setup(args);
//   Plan plan = make_plan(forest, setup.heads(), setup.kv_dtype(), *setup.cost, setup.options_for(forest, entries));
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/core/heads.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/forest/forest.hpp"
#include "codec/plan/planner.hpp"
#include "codec/plan/queries.hpp"

namespace codec {

// Where plans run.
enum class PlanTarget {
  cpu,   // the CPU engine
  cuda,  // the CUDA engine on the current device
  h200,  // an H200, planned without one: its SMs and the kernels' blocks per SM (codec plan --target h200)
};

// The attention the plans compute. The widths and dtypes of Q·K and of V
// (and the output) are kept apart for what comes (MLA: K 576 wide, V 512;
// fp8 KV under bf16 queries); today each pair must be equal.
struct AttentionShape {
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim_qk = 0;  // Q and K: 64, 128 or 256
  int head_dim_vo = 0;  // V and the output
  float sm_scale = 0;   // 0: 1/sqrt(head_dim_qk)
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
  int page_size = 0;
  float logits_soft_cap = 0;  // > 0: HeadConfig::logits_soft_cap

  HeadConfig heads() const { return {num_qo_heads, num_kv_heads, head_dim_qk, sm_scale, logits_soft_cap}; }
  // Throws codec::Error naming the field and value, for the target's engine.
  void validate(PlanTarget target) const;
};

// The workspace plans are written into. bytes 0: none given (each plan gets
// the workspace it needs: cuda_workspace_bytes, Plan::workspace). With
// max_batch_size > 0 (CUDA graphs) every plan is packed at one capacity, for
// batches of up to max_batch_size requests and max_num_pages page-table
// entries, so that a graph captured once replays every later plan; with
// max_query_tokens > 0, of up to that many query tokens in all (qo_indptr's
// last entry) and a custom or draft mask of up to max_mask_bytes bytes.
// Named as FlashInfer's wrappers name them, as its messages say.
struct WorkspaceSpec {
  std::size_t bytes = 0;            // workspace_buffer's bytes
  int max_batch_size = 0;           // requests a batch may hold
  std::int64_t max_num_pages = 0;   // page-table entries (kv_indices) a batch may hold
  int max_query_tokens = 0;         // query tokens a batch may hold; 0: one a request
  std::int64_t max_mask_bytes = 0;  // bytes of its packed mask (custom_mask_buf's)
};

struct PlannerSetupArgs {
  PlanTarget target = PlanTarget::cpu;
  int cpu_threads = 0;  // the CPU engine's threads; 0: OpenMP's default
  AttentionShape shape;
  WorkspaceSpec workspace;
  // Planner blocks; 0: the target's. A measured table is chosen for the
  // target's own count only (it was timed with that many blocks busy).
  int num_blocks = 0;
  // "": the measured table of the device and shape if one is found, else the
  // roofline (the CPU: always the roofline); "roofline"; or a table's file.
  std::string cost_table;
  // Folders searched for measured tables before cost_table_dirs() (the
  // Python package's own copy).
  std::vector<std::string> table_dirs;
};

struct PlannerSetup {
  PlanTarget target = PlanTarget::cpu;
  AttentionShape shape;
  WorkspaceSpec workspace;
  PlannerOptions options;  // at a capacity where the workspace has maxima
  std::shared_ptr<const CostModel> cost;
  std::string device;      // "cpu", or the GPU's name ("NVIDIA H200")
  std::string cost_table;  // the measured table's file, "" for the roofline
  // A buffer's start may be up to alignment − 1 bytes before the workspace
  // proper (256 bytes on CUDA, as cudaMalloc aligns; 16 on the CPU).
  std::size_t alignment = 0;

  HeadConfig heads() const { return shape.heads(); }
  DType kv_dtype() const { return shape.kv_dtype; }
  // The options of one batch's plan: the partial slots the workspace holds
  // for it (PlannerOptions::max_slots). Throws codec::Error naming the bytes
  // the batch needs where even its unsplit plan does not fit, and at a
  // capacity the maximum a batch exceeds.
  PlannerOptions options_for(const Forest& forest, std::int64_t page_entries, const QueryBatch& queries = {}) const;
};

PlannerSetup make_planner_setup(const PlannerSetupArgs& args);

// The file a measured table is kept in: "<device>_d<head_dim>_<dtype>.json",
// the device's name in lower case with every other character '_'
// ("nvidia_h200_d128_bf16.json").
std::string cost_table_file_name(const std::string& device, int head_dim, DType dtype);
// Where measured tables are looked for, in order: $CODEC_COST_TABLES (a
// folder) when set, the installed package's share/codec/cost_tables, the
// source tree's data/cost_tables.
std::vector<std::string> cost_table_dirs();
// The first `dirs` folder (then cost_table_dirs()) holding the table of this
// device and shape, or "".
std::string find_cost_table(const std::string& device, int head_dim, DType dtype,
                            const std::vector<std::string>& dirs = {});

}  // namespace codec
