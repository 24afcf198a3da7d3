#include "commands.hpp"

#include <omp.h>

#include <cctype>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "codec/core/error.hpp"
#include "codec/engine/cpu_engine.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/engine/planner_setup.hpp"
#include "codec/engine/reference.hpp"
#include "codec/plan/planner.hpp"
#include "measured.hpp"
#include "npy.hpp"
#if CODEC_HAS_CUDA
#include "cuda_bench.hpp"
#endif

namespace codec::tools {

namespace {

constexpr double kCpuScale = 1.0 / 16;  // CPU runs of the H200-sized workloads finish in seconds
constexpr double kH200Bandwidth = h200::kBandwidthGBps * 1e9;  // B/s
constexpr double kH200Flops = h200::kPeakTflops * 1e12;         // FLOP/s

constexpr bool kCudaBuilt = CODEC_HAS_CUDA;
bool gpu_available() { return cuda_device_count() > 0; }

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Aligned workspace for one plan.
struct Workspace {
  std::vector<std::byte> storage;
  std::span<std::byte> bytes;
  explicit Workspace(std::size_t n) : storage(n + 64) {
    auto base = reinterpret_cast<std::uintptr_t>(storage.data());
    bytes = {storage.data() + ((base + 63) / 64 * 64 - base), n};
  }
};

// A table row's workload: its name, its query tokens where there are several or a custom mask ("loogle:8 q4",
// "batch:64 t4x4", "batch:64 q4c"), and its variants ("long w128 c50 s": a window of 128 keys, a soft-cap of
// 50, sinks).
std::string label(const Workload& w) {
  std::string s = w.name;
  const std::string custom = w.custom_mask.empty() ? "" : "c";
  if (w.tree_width > 0) s += " t" + std::to_string(w.tree_width) + "x" + std::to_string(w.tree_depth);
  else if (w.q_len > 1 || !custom.empty()) s += " q" + std::to_string(w.q_len) + custom;
  if (w.window_left >= 0) s += " w" + std::to_string(w.window_left + 1);
  if (w.heads.logits_soft_cap > 0) {
    char cap[32];
    std::snprintf(cap, sizeof cap, " c%g", w.heads.logits_soft_cap);
    s += cap;
  }
  if (w.sinks) s += " s";
  return s;
}

// What the batch's rows see (QueryBatch::sees): the distinct KV tokens some
// row sees, which no plan can read less of (a window's floor), and the
// (row, key) pairs, which the FLOPs count.
struct Seen {
  std::int64_t tokens = 0;
  double row_keys = 0;
};
Seen seen_by_rows(const Forest& forest, const QueryBatch& queries) {
  std::vector<std::int64_t> node_start(forest.nodes.size()), kv_len;
  std::int64_t total = 0;
  for (std::size_t n = 0; n < forest.nodes.size(); ++n) node_start[n] = total, total += forest.nodes[n].num_tokens;
  for (int r = 0; r < forest.num_requests(); ++r) kv_len.push_back(forest.request_tokens(r));
  const std::vector<std::int64_t> mask_byte = mask_byte_offsets(kv_len, queries);
  std::vector<char> seen(std::size_t(total), 0);
  std::vector<std::int64_t> token;  // request r's KV position → its token in the forest
  std::vector<std::int32_t> path;
  Seen s;
  for (int r = 0; r < forest.num_requests(); ++r) {
    path.clear();
    for (std::int32_t n = forest.request_node[std::size_t(r)]; n >= 0; n = forest.nodes[std::size_t(n)].parent)
      path.push_back(n);
    token.clear();
    for (auto n = path.rbegin(); n != path.rend(); ++n)
      for (std::int64_t t = 0; t < forest.nodes[std::size_t(*n)].num_tokens; ++t) token.push_back(node_start[std::size_t(*n)] + t);
    const std::int64_t n = kv_len[std::size_t(r)];
    for (int i = 0; i < queries.q_len(r); ++i)
      for (std::int64_t j = 0; j < n; ++j)
        if (queries.sees(r, i, j, n, mask_byte[std::size_t(r)])) {
          s.row_keys += 1;
          seen[std::size_t(token[std::size_t(j)])] = 1;
        }
  }
  s.tokens = std::count(seen.begin(), seen.end(), char(1));
  return s;
}

// The mask of a batch's query tokens, as the JSON and the dump name it.
const char* mask_name(const WorkloadQueries& q) {
  if (q.qo_indptr.empty()) return "none";
  return q.mask == QueryMask::draft ? "draft" : q.mask == QueryMask::custom ? "custom" : "causal";
}

Measured time_cpu(const Plan& plan, const Batch& batch, const ReferenceResult& ref, int threads, int reps) {
  const PlanView p = plan.view();
  const std::size_t rows = std::size_t(p.num_requests) * p.num_qo_heads;
  Measured m;
  m.out.assign(rows * p.head_dim, NAN);  // poisoned: a row never written fails the check
  m.lse.assign(rows, NAN);
  Workspace ws(plan.workspace().bytes);
  const int B = p.num_requests, Hq = p.num_qo_heads;
  const AttentionIO io{QueryRows::contiguous(batch.q.data(), batch.q_dtype, B, Hq, p.head_dim),
                       OutputRows::contiguous(m.out.data(), DType::f32, B, Hq, p.head_dim),
                       LseRows::contiguous(m.lse.data(), B, Hq), LseBase::e,
                       batch.sinks.empty() ? nullptr : batch.sinks.data()};
  run_cpu(plan, batch.kv(), io, ws.bytes, {threads});  // warm-up, and the checked run
  m.error = compare(m.out.data(), ref.out);
  m.lse_error = compare(m.lse.data(), ref.lse);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run_cpu(plan, batch.kv(), io, ws.bytes, {threads});
    times.push_back(ms_since(t0));
  }
  std::sort(times.begin(), times.end());
  m.median_ms = times[times.size() / 2];
  return m;
}

void dump(const std::string& dir, const Workload& w, const Batch& b, const Forest& forest, const Measured& codec,
          const Measured& flat) {
  std::filesystem::create_directories(dir);
  const HeadConfig& h = w.heads;
  const std::int64_t B = b.num_queries();  // q's rows: a request's, or its query tokens
  nlohmann::json meta = {{"workload", w.name},           {"num_qo_heads", h.num_qo_heads},
                         {"num_kv_heads", h.num_kv_heads}, {"head_dim", h.head_dim},
                         {"page_size", b.page_size},       {"sm_scale", h.scale()},
                         {"layout", "NHD"},                {"dtype", std::string(to_string(b.dtype))},
                         {"q_dtype", std::string(to_string(b.q_dtype))},
                         {"lse_base", "e"},                {"q_len", w.q_len},
                         {"mask", mask_name(b.queries)},   {"window_left", w.window_left},
                         {"logits_soft_cap", h.logits_soft_cap}};
  std::ofstream meta_file(dir + "/meta.json");
  meta_file << meta.dump(2) << "\n";
  CODEC_CHECK(meta_file.good(), "--dump: cannot write '", dir, "/meta.json'");
  write_npy(dir + "/q.npy", to_floats(b.q, b.q_dtype).data(), {B, h.num_qo_heads, h.head_dim});
  const std::vector<std::int64_t> kv_shape = {b.num_pages, b.page_size, h.num_kv_heads, h.head_dim};
  if (is_fp8(b.dtype)) {  // the stored bits (torch views them as its float8 dtype) and the scales
    write_npy(dir + "/k_cache.npy", reinterpret_cast<const std::uint8_t*>(b.k.data()), kv_shape);
    write_npy(dir + "/v_cache.npy", reinterpret_cast<const std::uint8_t*>(b.v.data()), kv_shape);
    write_npy(dir + "/k_scale.npy", b.k_scale.data(), {std::int64_t(b.k_scale.size())});
    write_npy(dir + "/v_scale.npy", b.v_scale.data(), {std::int64_t(b.v_scale.size())});
  } else {
    write_npy(dir + "/k_cache.npy", to_floats(b.k, b.dtype).data(), kv_shape);
    write_npy(dir + "/v_cache.npy", to_floats(b.v, b.dtype).data(), kv_shape);
  }
  const ForestManager::Tables& t = b.tables;
  write_npy(dir + "/kv_indptr.npy", t.indptr.data(), {std::int64_t(t.indptr.size())});
  write_npy(dir + "/kv_indices.npy", t.indices.data(), {std::int64_t(t.indices.size())});
  write_npy(dir + "/kv_last_page_len.npy", t.last_page_len.data(), {std::int64_t(t.last_page_len.size())});
  if (!b.sinks.empty()) write_npy(dir + "/sinks.npy", b.sinks.data(), {std::int64_t(b.sinks.size())});
  if (!b.queries.qo_indptr.empty()) {
    const WorkloadQueries& q = b.queries;
    write_npy(dir + "/qo_indptr.npy", q.qo_indptr.data(), {std::int64_t(q.qo_indptr.size())});
    if (!q.mask_bits.empty())  // each request's packed draft or custom matrix (QueryBatch)
      write_npy(dir + "/mask_bits.npy", q.mask_bits.data(), {std::int64_t(q.mask_bits.size())});
  }
  write_npy(dir + "/out.npy", codec.out.data(), {B, h.num_qo_heads, h.head_dim});
  write_npy(dir + "/out_flat.npy", flat.out.data(), {B, h.num_qo_heads, h.head_dim});
  write_npy(dir + "/lse.npy", codec.lse.data(), {B, h.num_qo_heads});
  // The prefix forest the plans were made from, for tools that rebuild it
  // (e.g. one cascade level per tree depth for FlashInfer, bench/peers.py).
  nlohmann::json nodes = nlohmann::json::array();
  for (const ForestNode& n : forest.nodes)
    nodes.push_back({{"parent", n.parent},
                     {"num_tokens", n.num_tokens},
                     {"pages", std::vector<std::int32_t>(forest.pages.begin() + n.page_begin,
                                                         forest.pages.begin() + n.page_begin + n.num_pages)},
                     {"reqs", std::vector<std::int32_t>(forest.reqs.begin() + n.req_begin,
                                                        forest.reqs.begin() + n.req_begin + n.num_reqs)}});
  std::ofstream forest_file(dir + "/forest.json");
  forest_file << nlohmann::json{{"nodes", nodes}, {"request_node", forest.request_node}}.dump() << "\n";
  CODEC_CHECK(forest_file.good(), "--dump: cannot write '", dir, "/forest.json'");
}

// "a,b,c" → {"a", "b", "c"} ("" → {""}).
std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> items;
  for (std::size_t at = 0; at <= s.size();) {
    const std::size_t comma = std::min(s.find(',', at), s.size());
    items.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

}  // namespace

std::vector<std::string> expand_workloads(const std::string& spec) {
  std::vector<std::string> specs;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(spec.find(',', begin), spec.size());
    const std::string item = spec.substr(begin, end - begin);
    CODEC_CHECK(!item.empty(), "--workload '", spec, "': empty entry in the comma-separated list");
    if (item == "all") {
      const std::vector<std::string> all = builtin_workload_names();
      specs.insert(specs.end(), all.begin(), all.end());
    } else {
      specs.push_back(item);
    }
    if (end == spec.size()) return specs;
    begin = end + 1;
  }
}

// A custom mask file (--custom-mask) as packed bits over the workload's
// requests: a bool array (one element a key, requests concatenated) is packed
// here, each request from a byte boundary; a uint8 array is taken as packed.
std::vector<std::uint8_t> read_custom_mask(const std::string& path, const Workload& w) {
  CODEC_CHECK(w.tree_width == 0, "--custom-mask and --tree: give one");
  NpyBytes file = read_npy_bytes(path);
  if (!file.boolean) return std::move(file.data);
  std::int64_t keys = 0;
  for (int r = 0; r < int(w.requests.size()); ++r) keys += std::int64_t(w.q_len) * w.request_tokens(r);
  CODEC_CHECK(std::int64_t(file.data.size()) == keys, "--custom-mask '", clip(path), "': ", file.data.size(),
              " bools; the ", w.requests.size(), " requests' [q_len ", w.q_len, ", kv_len] matrices hold ", keys);
  std::vector<std::uint8_t> bits;
  std::size_t next = 0;
  for (int r = 0; r < int(w.requests.size()); ++r) {
    const std::int64_t n = std::int64_t(w.q_len) * w.request_tokens(r), base = std::int64_t(bits.size()) * 8;
    bits.resize(bits.size() + std::size_t((n + 7) / 8), 0);
    for (std::int64_t k = 0; k < n; ++k)
      if (file.data[next++]) bits[std::size_t((base + k) / 8)] |= std::uint8_t(1u << ((base + k) % 8));
  }
  return bits;
}

Workload load_workload(const std::string& spec, const WorkloadArgs& args, double default_scale, bool with_batch) {
  Workload w = resolve_workload(spec);
  if (!args.model.empty()) w.model = args.model, w.heads = model_heads(args.model);
  if (!args.dtype.empty()) w.dtype = parse_dtype(args.dtype);
  if (args.page_size > 0) w.page_size = args.page_size;
  const double scale = args.scale > 0 ? args.scale : default_scale;
  if (scale != 1.0) w = w.scaled(scale);
  if (args.q_len != 1 || !args.tree.empty()) {
    int width = 0, depth = 0;
    if (!args.tree.empty()) {
      const std::vector<std::string> parts = comma_list(args.tree);
      try {
        CODEC_CHECK(parts.size() == 2, "");
        std::size_t used_w = 0, used_d = 0;
        width = std::stoi(parts[0], &used_w), depth = std::stoi(parts[1], &used_d);
        CODEC_CHECK(used_w == parts[0].size() && used_d == parts[1].size(), "");
      } catch (const std::exception&) {
        CODEC_FAIL("--tree '", clip(args.tree), "' is not W,D (two integers >= 1)");
      }
    }
    w = w.with_queries(args.q_len, width, depth);
  }
  if (!args.custom_mask.empty()) w = w.with_custom_mask(read_custom_mask(args.custom_mask, w));
  if (args.window > 0) w.window_left = args.window - 1;
  if (args.soft_cap > 0) w.heads.logits_soft_cap = float(args.soft_cap);
  w.sinks = w.sinks || args.sinks;
  w.validate();
  const Workload::Footprint f = w.footprint();
  const double need = f.tables_bytes + (with_batch ? f.batch_bytes : 0), limit = args.max_memory_gb * 1e9;
  CODEC_CHECK(need <= limit, "workload '", w.name, "' needs about ", fixed(need / 1e9, 1), " GB of host memory (",
              fixed(f.tables_bytes / 1e9, 1), " GB of token ids and page tables",
              with_batch ? ", " + fixed(f.batch_bytes / 1e9, 1) + " GB of K, V and queries" : std::string(),
              " at page size ", w.page_size, "), more than --max-memory ", args.max_memory_gb, " GB");
  return w;
}

void apply_split(const std::string& split, PlannerOptions& options) {
  if (split == "adaptive") options.split = SplitPolicy::adaptive;
  else if (split == "none") options.split = SplitPolicy::none;
  else if (split == "exhaustive") options.split = SplitPolicy::exhaustive;
  else if (split.rfind("fixed:", 0) == 0) {
    options.split = SplitPolicy::fixed;
    try {
      std::size_t used = 0;
      options.fixed_splits = std::stoi(split.substr(6), &used);
      CODEC_CHECK(used == split.size() - 6 && options.fixed_splits >= 1, "");
    } catch (const std::exception&) {
      CODEC_FAIL("--split '", split, "': fixed:K needs an integer K >= 1");
    }
  } else {
    CODEC_FAIL("--split '", split, "' is not one of adaptive, none, fixed:K, exhaustive");
  }
}

void check_policies(const WorkloadArgs& args) {
  for (const std::string& split : comma_list(args.split)) {
    PlannerOptions check;
    apply_split(split, check);
  }
  for (const std::string& wide : comma_list(args.wide))
    CODEC_CHECK(wide == "auto" || wide == "off", "--wide '", args.wide, "': each entry must be auto or off");
}

std::string default_cost_table_path(const std::string& device, const HeadConfig& heads, DType dtype) {
  return std::string(CODEC_DATA_DIR) + "/cost_tables/" + cost_table_file_name(device, heads.head_dim, dtype);
}

PlannerSetup planner_setup(const std::string& target, const Workload& w, const WorkloadArgs& args, int threads) {
  PlannerSetupArgs a;
  a.target = target == "cpu" ? PlanTarget::cpu : target == "cuda" ? PlanTarget::cuda : PlanTarget::h200;
  a.cpu_threads = threads;
  a.shape = {w.heads.num_qo_heads, w.heads.num_kv_heads, w.heads.head_dim, w.heads.head_dim, w.heads.sm_scale,
             is_fp8(w.dtype) ? DType::bf16 : w.dtype, w.dtype, w.page_size};
  a.num_blocks = args.blocks;
  a.cost_table = args.cost_table;
  PlannerSetup s = make_planner_setup(a);
  // The tool's experiments with the target's options (bench's --wide auto,off plans both from the auto options).
  if (args.wide == "off") s.options.wide_tile_rows = 0;
  if (args.tail_tokens >= 0) s.options.wide_tail_tokens = args.tail_tokens;
  if (args.wide_max_masked_rows >= 0) s.options.wide_max_masked_rows = args.wide_max_masked_rows;
  if (args.wide_max_chunk >= 0) s.options.wide_max_chunk_tokens = args.wide_max_chunk;
  if (args.price_tile >= 0) s.options.price_tile_tokens = args.price_tile;
  if (args.beside_wide > 0) s.options.beside_wide_price = args.beside_wide;
  return s;
}

int run_bench(const WorkloadArgs& args, const BenchArgs& bench) {
  const bool gpu = gpu_available();
  const std::string backend = bench.backend == "auto" ? (gpu ? "cuda" : "cpu") : bench.backend;
  CODEC_CHECK(backend != "cuda" || gpu, "--backend cuda: no CUDA device is available",
              kCudaBuilt ? "" : " (this build has no CUDA engine)");
  const bool cuda = backend == "cuda";
  const int threads = bench.threads > 0 ? bench.threads : omp_get_max_threads();
  const int reps = bench.reps > 0 ? bench.reps : (cuda ? 30 : 5);
  const double default_scale = cuda ? 1.0 : kCpuScale;
  const std::vector<std::string> specs = expand_workloads(args.workload);
  // --split a,b and --wide auto,off: one CoDec row per policy and wide choice against one flat run
  const std::vector<std::string> splits = comma_list(args.split), wides = comma_list(args.wide);
  check_policies(args);
  struct Variant {
    std::string split, wide, label;
  };
  std::vector<Variant> variants;
  for (const std::string& split : splits)
    for (const std::string& wide : wides)
      variants.push_back({split, wide,
                          (splits.size() > 1 ? "  split " + split : std::string()) +
                              (wides.size() > 1 ? "  wide " + wide : std::string())});
  // Where results go is checked before any work: a run must not end by finding it cannot save them.
  if (!bench.dump.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(bench.dump, ec);
    const std::string probe = bench.dump + "/.codec_probe";
    CODEC_CHECK(!ec && std::ofstream(probe).good(), "--dump: cannot write into folder '", bench.dump, "'",
                ec ? " (" + ec.message() + ")" : std::string());
    std::filesystem::remove(probe, ec);
  }
  if (!bench.save.empty())
    CODEC_CHECK(std::ofstream(bench.save).good(), "--save: cannot write '", bench.save, "'");
  // Every workload is resolved and sized, and its cost model read, before the first one runs.
  std::vector<Workload> workloads;
  std::vector<PlannerSetup> setups;
  for (const std::string& spec : specs) {
    workloads.push_back(load_workload(spec, args, default_scale, /*with_batch=*/true));
    setups.push_back(planner_setup(backend, workloads.back(), args, threads));
  }
  nlohmann::json rows = nlohmann::json::array();
  bool all_pass = true;
  if (!args.json) {
    std::printf("backend %s, median of %d runs; times in ms; KV MB as each plan reads it%s\n",
                cuda ? "cuda" : (std::to_string(threads) + "-thread cpu").c_str(), reps,
                cuda ? "; floor = max(KV bytes some row sees / 4.2 TB/s, FLOPs / 790 TFLOP/s) on an H200"
                     : "; no floor: it is the H200's, for GPU runs");
    std::printf("%-14s %6s %5s %10s %9s %9s %8s %9s %9s %8s %8s %6s %9s %9s %6s\n", "workload", "scale", "reqs",
                "unique_tok", "codec_ms", "flat_ms", "speedup", "codec_MB", "flat_MB", "floor_ms", "x_floor", "merge",
                "err_codec", "err_flat", "check");
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const Workload& w = workloads[i];
    const double scale = args.scale > 0 ? args.scale : default_scale;
    auto progress = [&](const char* what) {
      std::fprintf(stderr, "[%zu/%zu] %s: %s\n", i + 1, specs.size(), specs[i].c_str(), what);
    };
    progress("building the batch");
    const Batch batch = materialize(w);
    const PageTable table = batch.page_table();
    const auto t0 = std::chrono::steady_clock::now();
    const Forest forest = derive_forest(table);
    const double derive_ms = ms_since(t0);
    const PlannerSetup& setup = setups[i];
    const PlannerOptions& opt = setup.options;
    const CostModel* cost = setup.cost.get();
    if (i == 0) std::fprintf(stderr, "cost model: %s\n", cost->describe().c_str());
    const QueryBatch queries = batch.queries.view();
    const Plan flat = make_plan(flatten(forest), w.heads, w.dtype, *cost, opt, queries);  // split-KV, no sharing
    progress("fp64 reference");
    const ReferenceResult ref =
        reference_attention(table, batch.kv(), w.heads, batch.q.data(), queries, batch.q_dtype, batch.sinks);
    progress("timing CoDec and flat");
#if CODEC_HAS_CUDA
    const L2Flush flush = bench.flush == "read" ? L2Flush::read : L2Flush::write;
    std::unique_ptr<CudaBench> gpu_bench = cuda ? std::make_unique<CudaBench>(batch, flush) : nullptr;
#endif
    auto measure = [&](const Plan& plan, const char* label) {
#if CODEC_HAS_CUDA
      if (cuda) return gpu_bench->run(plan, ref, reps, label);
#endif
      (void)label;
      return time_cpu(plan, batch, ref, threads, reps);
    };
    const Measured mf = measure(flat, "flat");
    const double tol = tolerance(w.dtype);
    const double bytes_per_token = 2.0 * w.heads.head_dim * dtype_size(w.dtype);
    const double flat_mb = flat.stats().kv_tokens_read * bytes_per_token / 1e6;
    // the floor: the KV some row sees, read once; 4 · D FLOPs per (row, key) a row sees, a row per query token
    // and qo head (masks and windows leave keys out of both)
    const Seen seen = seen_by_rows(forest, queries);
    const double unique_bytes = double(forest.unique_tokens()) * w.heads.num_kv_heads * bytes_per_token;
    const double seen_bytes = double(seen.tokens) * w.heads.num_kv_heads * bytes_per_token;
    const double flops = 4.0 * seen.row_keys * w.heads.num_qo_heads * w.heads.head_dim;
    const double floor_ms = std::max(seen_bytes / kH200Bandwidth, flops / kH200Flops) * 1e3;
    for (const Variant& variant : variants) {
      const std::string& split = variant.split;
      PlannerOptions shared_opt = opt;
      apply_split(split, shared_opt);
      if (variant.wide == "off") shared_opt.wide_tile_rows = 0;
      const Plan shared = make_plan(forest, w.heads, w.dtype, *cost, shared_opt, queries);
      const Measured mc = measure(shared, "codec");
      const bool pass = mc.error.within(tol) && mf.error.within(tol) && mc.lse_error.within(tol) &&
                        mf.lse_error.within(tol);
      all_pass = all_pass && pass;
      if (!bench.dump.empty() && &variant == &variants.front())
        dump(specs.size() == 1 ? bench.dump : bench.dump + "/" + w.name, w, batch, forest, mc, mf);
      const double codec_mb = shared.stats().kv_tokens_read * bytes_per_token / 1e6;
      rows.push_back({{"workload", w.name},
                      {"dtype", std::string(to_string(w.dtype))},
                      {"q_len", w.q_len},
                      {"tree", w.tree_width > 0 ? nlohmann::json::array({w.tree_width, w.tree_depth})
                                                : nlohmann::json()},
                      {"mask", mask_name(batch.queries)},
                      {"window_left", w.window_left},
                      {"logits_soft_cap", w.heads.logits_soft_cap},
                      {"sinks", w.sinks},
                      {"split", split},
                      {"wide", variant.wide},
                      {"scale", scale},
                      {"backend", backend},
                      {"l2_flush", cuda ? bench.flush : "none"},
                      {"requests", batch.num_requests()},
                      {"unique_kv_tokens", forest.unique_tokens()},
                      {"seen_kv_tokens", seen.tokens},
                      {"flat_kv_tokens", forest.flat_tokens()},
                      {"codec_ms", mc.median_ms},
                      {"codec_partial_ms", mc.partial_ms},
                      {"merge_share", mc.partial_ms >= 0 ? 1.0 - mc.partial_ms / mc.median_ms : -1.0},
                      {"flat_ms", mf.median_ms},
                      {"flat_partial_ms", mf.partial_ms},
                      {"codec_host_us", mc.host_us},
                      {"speedup", mf.median_ms / mc.median_ms},
                      {"codec_kv_mb", codec_mb},
                      {"flat_kv_mb", flat_mb},
                      {"unique_kv_mb", unique_bytes / 1e6},
                      {"seen_kv_mb", seen_bytes / 1e6},
                      {"floor_ms", floor_ms},  // the H200's, whatever the backend
                      {"codec_over_floor", cuda ? nlohmann::json(mc.median_ms / floor_ms) : nlohmann::json()},
                      {"codec_rel_l2", mc.error.rel_l2},
                      {"flat_rel_l2", mf.error.rel_l2},
                      {"codec_lse_rel_l2", mc.lse_error.rel_l2},
                      {"flat_lse_rel_l2", mf.lse_error.rel_l2},
                      {"tolerance", tol},
                      {"derive_ms", derive_ms},
                      {"plan_ms", shared.stats().plan_ms},
                      {"plan_quality", shared.stats().quality()},
                      {"max_splits", shared.stats().max_splits},
                      {"predicted_merge_us", shared.stats().merge_us},
                      {"blocks", opt.num_blocks},
                      {"wide_tasks", shared.stats().num_wide_tasks},
                      {"tails", shared.stats().num_tails},
                      {"cost_model", cost->describe()},
                      {"pass", pass}});
      if (!args.json)
        std::printf("%-14s %6s %5d %10lld %9s %9s %8s %9s %9s %8s %8s %6s %9.2e %9.2e %6s%s\n", label(w).c_str(),
                    fixed(scale, 4).c_str(), batch.num_requests(), static_cast<long long>(forest.unique_tokens()),
                    fixed(mc.median_ms, 4).c_str(), fixed(mf.median_ms, 4).c_str(),
                    fixed(mf.median_ms / mc.median_ms, 2).c_str(), fixed(codec_mb, 1).c_str(),
                    fixed(flat_mb, 1).c_str(), cuda ? fixed(floor_ms, 4).c_str() : "-",
                    cuda ? fixed(mc.median_ms / floor_ms, 2).c_str() : "-",
                    mc.partial_ms >= 0 ? fixed(100.0 * (1.0 - mc.partial_ms / mc.median_ms), 1).c_str() : "-",
                    mc.error.rel_l2, mf.error.rel_l2, pass ? "ok" : "FAIL", variant.label.c_str());
      std::fflush(stdout);
      if (!pass)
        std::fprintf(stderr,
                     "codec: %s (split %s, wide %s) failed verification: codec %s, lse %s; flat %s, lse %s "
                     "(tolerance %g)\n",
                     w.name.c_str(), split.c_str(), variant.wide.c_str(), mc.error.describe().c_str(), mc.lse_error.describe().c_str(),
                     mf.error.describe().c_str(), mf.lse_error.describe().c_str(), tol);
    }
  }
  if (args.json) std::cout << rows.dump(2) << "\n";
  if (!bench.save.empty()) {
    std::ofstream file(bench.save);
    CODEC_CHECK(file.good(), "--save: cannot write '", bench.save, "'");
    file << rows.dump(2) << "\n";
  }
  return all_pass ? 0 : 1;
}

int run_plan(const WorkloadArgs& args, const std::string& target) {
  const std::vector<std::string> specs = expand_workloads(args.workload);
  check_policies(args);
  CODEC_CHECK(comma_list(args.split).size() == 1, "--split '", args.split, "': plan takes one policy (bench takes a list)");
  // Every workload is resolved and sized before the table begins, as in bench.
  std::vector<Workload> workloads;
  for (const std::string& spec : specs) workloads.push_back(load_workload(spec, args, 1.0, /*with_batch=*/false));
  nlohmann::json rows = nlohmann::json::array();
  if (!args.json)
    std::printf("%-14s %5s %6s %6s %7s %6s %6s %6s %6s %11s %11s %8s %6s %8s %9s %8s\n", "workload", "reqs", "nodes",
                "units", "tasks", "wide", "tails", "blocks", "max_bk", "makespan_us", "lowbound_us", "ratio", "reads",
                "merge_us", "derive_ms", "plan_ms");
  for (const Workload& w : workloads) {
    const WorkloadTables tables = workload_page_tables(w);
    const auto t0 = std::chrono::steady_clock::now();
    const Forest forest = derive_forest(tables.view());
    const double derive_ms = ms_since(t0);
    const PlannerSetup setup = planner_setup(target, w, args, omp_get_max_threads());
    PlannerOptions opt = setup.options;
    const CostModel* cost = setup.cost.get();
    apply_split(args.split, opt);
    const WorkloadQueries queries = workload_queries(w);
    const Plan plan = make_plan(forest, w.heads, w.dtype, *cost, opt, queries.view());
    const PlanStats& s = plan.stats();
    rows.push_back({{"workload", w.name},
                    {"q_len", w.q_len},
                    {"mask", mask_name(queries)},
                    {"target", target},
                    {"split", args.split},
                    {"requests", s.batch_requests},
                    {"query_rows", s.num_requests},
                    {"nodes", s.num_nodes},
                    {"units", s.num_units},
                    {"tasks", s.num_tasks},
                    {"wide_tasks", s.num_wide_tasks},
                    {"tails", s.num_tails},
                    {"merged_requests", s.merged_requests},
                    {"blocks", s.num_blocks},
                    {"max_splits", s.max_splits},
                    {"slots", s.num_slots},
                    {"makespan_us", s.makespan_us},
                    {"lower_bound_us", s.lower_bound_us},
                    {"ratio", s.quality()},
                    {"merge_us", s.merge_us},
                    {"derive_ms", derive_ms},
                    {"plan_ms", s.plan_ms},
                    {"kv_tokens_read", s.kv_tokens_read},
                    {"unique_kv_tokens", s.unique_kv_tokens},
                    {"cost_model", cost->describe()}});
    if (!args.json)
      std::printf("%-14s %5d %6d %6d %7d %6d %6d %6d %6d %11s %11s %8s %6s %8s %9s %8s\n", label(w).c_str(),
                  s.batch_requests, s.num_nodes, s.num_units, s.num_tasks, s.num_wide_tasks, s.num_tails, s.num_blocks,
                  s.max_splits,
                  fixed(s.makespan_us, 2).c_str(),
                  fixed(s.lower_bound_us, 2).c_str(), fixed(s.quality(), 4).c_str(),
                  fixed(s.read_factor(), 2).c_str(),
                  fixed(s.merge_us, 2).c_str(), fixed(derive_ms, 3).c_str(), fixed(s.plan_ms, 3).c_str());
  }
  if (args.json) std::cout << rows.dump(2) << "\n";
  return 0;
}

}  // namespace codec::tools
