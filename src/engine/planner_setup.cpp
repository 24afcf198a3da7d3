#include "codec/engine/planner_setup.hpp"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "codec/core/error.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/cuda_engine.hpp"

namespace codec {

namespace {

constexpr std::size_t kCudaAlign = 256, kCpuAlign = 16;  // cuda_workspace_bytes' plan region; run_cpu's workspace

std::shared_ptr<const CostModel> table_model(const std::string& path, const AttentionShape& shape) {
  CostTable table = CostTable::load(path);
  CODEC_CHECK(table.head_dim == shape.head_dim_qk && table.dtype == shape.kv_dtype, "cost table '", path,
              "' was measured for head_dim ", table.head_dim, " ", to_string(table.dtype), ", not head_dim ",
              shape.head_dim_qk, " ", to_string(shape.kv_dtype));
  return std::make_shared<TableCostModel>(std::move(table));
}

}  // namespace

void AttentionShape::validate(PlanTarget target) const {
  heads().validate();
  CODEC_CHECK(head_dim_vo == head_dim_qk, "head_dim_vo ", head_dim_vo, " differs from head_dim_qk ", head_dim_qk,
              ": V and K of different widths are not supported yet");
  if (is_fp8(kv_dtype))
    CODEC_CHECK(q_dtype == DType::f16 || q_dtype == DType::bf16 || (target == PlanTarget::cpu && q_dtype == DType::f32),
                "q dtype ", to_string(q_dtype), " under a ", to_string(kv_dtype), " cache: q is fp16 or bf16",
                target == PlanTarget::cpu ? " (or fp32)" : "");
  else
    CODEC_CHECK(q_dtype == kv_dtype, "q dtype ", to_string(q_dtype), " and KV dtype ", to_string(kv_dtype),
                " differ: q and KV share one dtype but under an fp8 cache");
  CODEC_CHECK(page_size >= 1, "page_size ", page_size, " must be >= 1");
  CODEC_CHECK(target == PlanTarget::cpu || kv_dtype != DType::f32,
              "the CUDA engine takes float16 or bfloat16, not float32");
}

std::string cost_table_file_name(const std::string& device, int head_dim, DType dtype) {
  std::string name = device;
  for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? char(std::tolower(ch)) : '_';
  return name + "_d" + std::to_string(head_dim) + "_" + std::string(to_string(dtype)) + ".json";
}

std::vector<std::string> cost_table_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("CODEC_COST_TABLES"); env != nullptr && *env != '\0') dirs.push_back(env);
  dirs.push_back(CODEC_INSTALLED_COST_TABLES);
  dirs.push_back(CODEC_SOURCE_COST_TABLES);
  return dirs;
}

std::string find_cost_table(const std::string& device, int head_dim, DType dtype,
                            const std::vector<std::string>& dirs) {
  const std::string name = cost_table_file_name(device, head_dim, dtype);
  std::vector<std::string> all = dirs;
  for (std::string& d : cost_table_dirs()) all.push_back(std::move(d));
  for (const std::string& dir : all) {
    std::error_code ec;
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    if (std::filesystem::is_regular_file(path, ec)) return path.string();
  }
  return "";
}

PlannerSetup make_planner_setup(const PlannerSetupArgs& args) {
  const AttentionShape& shape = args.shape;
  shape.validate(args.target);
  CODEC_CHECK(args.cpu_threads >= 0, "cpu_threads ", args.cpu_threads, " must be >= 0");
  CODEC_CHECK(args.num_blocks >= 0, "num_blocks ", args.num_blocks, " must be >= 0");
  const WorkspaceSpec& ws = args.workspace;
  CODEC_CHECK(ws.max_batch_size >= 0 && ws.max_num_pages >= 0, "max_batch_size ", ws.max_batch_size,
              " and max_num_pages ", ws.max_num_pages, " must be >= 0");
  CODEC_CHECK(ws.max_batch_size == 0 || (args.target == PlanTarget::cuda && ws.bytes > 0 && ws.max_num_pages >= 1),
              "a fixed capacity (CUDA graphs: max_batch_size ", ws.max_batch_size,
              ") needs the CUDA engine, a workspace and max_num_pages >= 1");
  CODEC_CHECK((ws.max_query_tokens == 0 && ws.max_mask_bytes == 0) || ws.max_batch_size > 0,
              "max_query_tokens ", ws.max_query_tokens, " and max_mask_bytes ", ws.max_mask_bytes,
              " are maxima of CUDA-graph mode: give max_batch_size too");
  const HeadConfig heads = shape.heads();
  PlannerSetup s;
  s.target = args.target;
  s.shape = shape;
  s.workspace = ws;
  RooflineParams roofline = RooflineParams::h200();
  switch (args.target) {
    case PlanTarget::cpu: {
      const int threads = args.cpu_threads > 0 ? args.cpu_threads : omp_get_max_threads();
      s.options = cpu_planner_options(threads);
      roofline = RooflineParams::cpu(threads);
      s.device = "cpu";
      s.alignment = kCpuAlign;
      break;
    }
    case PlanTarget::cuda:
      s.options = cuda_planner_options(heads, shape.kv_dtype);
      s.device = cuda_device_info(heads, shape.kv_dtype).name;
      s.alignment = kCudaAlign;
      break;
    case PlanTarget::h200:
      // What cuda_device_info says of an H200: its 132 SMs × the PAC blocks
      // each holds, and wide tasks at the head dims the wide kernel is built for.
      s.options = cuda_planner_options(heads, h200::kSms, cuda_pac_min_blocks_per_sm(shape.head_dim_qk),
                                       cuda_wide_head_dim(shape.head_dim_qk));
      s.device = "NVIDIA H200";
      s.alignment = kCudaAlign;
      break;
  }
  if (args.num_blocks > 0) {
    s.options.num_blocks = args.num_blocks;
    if (s.options.num_blocks % s.options.wide_span != 0) s.options.wide_tile_rows = 0;  // no whole wide blocks
  }
  roofline.concurrent_blocks = s.options.num_blocks;
  if (args.cost_table == "roofline") {
    s.cost = std::make_shared<RooflineCostModel>(roofline, heads, shape.kv_dtype, shape.q_dtype);
  } else if (!args.cost_table.empty()) {
    s.cost = table_model(args.cost_table, shape);
    s.cost_table = args.cost_table;
  } else {
    // A GPU's measured table, where one is found for it and the plan uses
    // the block count it was measured with.
    if (args.target != PlanTarget::cpu && args.num_blocks == 0)
      s.cost_table = find_cost_table(s.device, shape.head_dim_qk, shape.kv_dtype, args.table_dirs);
    if (!s.cost_table.empty()) s.cost = table_model(s.cost_table, shape);
    else s.cost = std::make_shared<RooflineCostModel>(roofline, heads, shape.kv_dtype, shape.q_dtype);
  }
  if (ws.max_batch_size > 0)
    s.options.capacity = cuda_plan_capacity(ws.bytes, ws.max_batch_size, ws.max_num_pages, heads, s.options,
                                            {ws.max_query_tokens, ws.max_mask_bytes});
  return s;
}

PlannerOptions PlannerSetup::options_for(const Forest& forest, std::int64_t page_entries,
                                         const QueryBatch& queries) const {
  const HeadConfig h = heads();
  const int batch = queries.num_queries(forest.num_requests());  // the plan's requests: its query tokens
  PlannerOptions options = this->options;
  const QueryCapacity query_capacity{workspace.max_query_tokens, workspace.max_mask_bytes};
  if (options.capacity) {
    const int requests = forest.num_requests();
    CODEC_CHECK(requests <= workspace.max_batch_size, "the batch has ", requests, " requests, more than max_batch_size ",
                workspace.max_batch_size, " of this CUDA-graph workspace");
    CODEC_CHECK(page_entries <= workspace.max_num_pages, "kv_indices has ", page_entries,
                " entries, more than max_num_pages ", workspace.max_num_pages, " of this CUDA-graph workspace");
    if (workspace.max_query_tokens == 0) {
      CODEC_CHECK(batch == requests, "the batch has ", batch, " query tokens for ", requests,
                  " requests; this CUDA-graph workspace was made for one a request (give max_query_tokens)");
      CODEC_CHECK(queries.window_left < 0, "window_left ", queries.window_left, ": a sliding window's rows carry "
                  "masks, which this CUDA-graph workspace was made without (give max_query_tokens)");
    } else {
      CODEC_CHECK(batch <= workspace.max_query_tokens, "the batch has ", batch,
                  " query tokens, more than max_query_tokens ", workspace.max_query_tokens,
                  " of this CUDA-graph workspace");
    }
    const auto mask_bytes = std::int64_t(queries.mask_bits.size());
    CODEC_CHECK(mask_bytes <= workspace.max_mask_bytes, "the mask has ", mask_bytes,
                " bytes, more than max_mask_bytes ", workspace.max_mask_bytes, " of this CUDA-graph workspace");
  }
  if (workspace.bytes == 0) return options;  // each plan gets the workspace it needs
  // The slots the workspace holds for this batch; a batch that needs more
  // even unsplit is refused naming the bytes it needs.
  const std::int64_t need = min_slots(forest, h, queries);
  std::int64_t slots = 0;
  std::size_t need_bytes = 0;
  if (target == PlanTarget::cpu) {
    slots = cpu_workspace_slots(workspace.bytes, h.head_dim);
    need_bytes = Plan::workspace_for(need, h.head_dim).bytes + alignment;
  } else {
    // Without a capacity, the batch's own sizes.
    const int requests = options.capacity ? workspace.max_batch_size : forest.num_requests();
    const std::int64_t entries = options.capacity ? workspace.max_num_pages : std::max<std::int64_t>(page_entries, 1);
    const bool masks = batch > forest.num_requests() || !queries.mask_bits.empty() || queries.window_left >= 0;
    const QueryCapacity q = options.capacity ? query_capacity
                            : masks          ? QueryCapacity{batch, std::int64_t(queries.mask_bits.size())}
                                             : QueryCapacity{};
    need_bytes = cuda_workspace_bytes(PlanCapacity::for_batches(requests, entries, h, options.max_tile_rows,
                                                                options.num_blocks, need, options.wide_blocks(),
                                                                options.max_tail_tokens(), q),
                                      h.head_dim) +
                 alignment;
    if (options.capacity) slots = options.capacity->slots;
    else if (need_bytes <= workspace.bytes)
      slots = cuda_plan_capacity(workspace.bytes - alignment, requests, entries, h, options, q).slots;
  }
  CODEC_CHECK(need <= slots, "workspace_buffer of ", workspace.bytes,
              " bytes is too small for this batch: it needs at least ", need_bytes, " bytes (", need,
              " partial slots of head_dim ", h.head_dim, ")");
  options.max_slots = slots;
  return options;
}

}  // namespace codec
