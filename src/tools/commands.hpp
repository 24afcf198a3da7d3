#pragma once
// The codec command-line tool: shared options and the subcommands.
#include <cstdint>
#include <string>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "codec/engine/planner_setup.hpp"
#include "codec/plan/planner.hpp"
#include "workload/workload.hpp"

namespace codec::tools {

struct WorkloadArgs {
  std::string workload = "batch:64";  // built-in name, JSON file, or "all"
  std::string model;                  // overrides the workload's model
  std::string dtype;                  // overrides the workload's dtype
  int page_size = 0;                  // overrides the workload's page size
  double scale = 0;                   // token-count factor; 0 picks the backend's default
  int q_len = 1;                      // query tokens a request (Workload::with_queries)
  std::string tree;                   // "W,D": a draft tree of D levels of W tokens
  std::string custom_mask;            // .npy of a custom mask over the requests' [q_len, kv_len] keys
  int window = 0;                     // a sliding window of this many keys (window_left + 1); 0 keeps the workload's
  double soft_cap = 0;                // HeadConfig::logits_soft_cap; 0 keeps the workload's
  bool sinks = false;                 // attention sinks drawn from the seed (Workload::sinks)
  std::string cost_table;             // measured cost table instead of the roofline
  int blocks = 0;                     // planner blocks m; 0 picks the backend's default
  std::string split = "adaptive";     // CoDec plan's splitting: adaptive, none, fixed:K, exhaustive
  std::string wide = "auto";          // wide tasks: "auto" (where the target runs them) or "off"
  int tail_tokens = -1;               // PlannerOptions::wide_tail_tokens; −1 keeps the target's
  int wide_max_masked_rows = -1;      // PlannerOptions::wide_max_masked_rows; −1 keeps the target's
  int wide_max_chunk = -1;            // PlannerOptions::wide_max_chunk_tokens; −1 keeps the target's
  int price_tile = -1;                // PlannerOptions::price_tile_tokens; −1 keeps the target's
  double beside_wide = 0;             // PlannerOptions::beside_wide_price; 0 keeps the target's
  double max_memory_gb = 16;          // host memory a workload may take (Workload::footprint), refused beyond
  bool json = false;
};

struct BenchArgs {
  std::string backend = "auto";
  int threads = 0;
  int reps = 0;  // 0: the backend's default
  std::string dump;
  std::string save;  // also write the rows as JSON to this file
  std::string flush = "read";  // how the GPU's L2 is flushed before each timed run: "read" or "write"
};

// Workload specs named by --workload: a comma-separated list, in which "all"
// expands to every built-in sweep point.
std::vector<std::string> expand_workloads(const std::string& spec);
// Resolves a spec, applies the overrides and the scale, and refuses a
// workload whose host memory (its page tables, and with_batch its K/V pool
// and queries) would exceed args.max_memory_gb, before allocating any of it.
Workload load_workload(const std::string& spec, const WorkloadArgs& args, double default_scale, bool with_batch);
// Sets options.split (and fixed_splits) from "adaptive", "none", "fixed:K" or "exhaustive".
void apply_split(const std::string& split, PlannerOptions& options);
// Refuses a bad --split or --wide (each a value or a comma-separated list)
// before any work, naming the argument and the value.
void check_policies(const WorkloadArgs& args);
// How `bench` and `plan` plan for a target ("cpu"; "h200", a plan for the H200
// made without one; "cuda", the GPU at hand): blocks, row tiles and the cost
// model (the --cost-table file or 'roofline' if given; else the table measured
// on that device if the repo has one and --blocks does not override the
// block count it was measured with; else the roofline). Its callers have
// refused a bad --split or --wide already (check_policies), once per command.
// The library's setup for `target` ("cpu", "cuda" or "h200") and the
// workload's heads, dtype and page size, with the tool's overrides of its
// options (--blocks, --cost-table, --wide off, --tail-tokens, --wide-max-masked-rows,
// --wide-max-chunk, --price-tile, --beside-wide).
PlannerSetup planner_setup(const std::string& target, const Workload& w, const WorkloadArgs& args, int threads);

int run_bench(const WorkloadArgs& args, const BenchArgs& bench);
// Measures a cost table on the current GPU (CUDA builds only).
int run_profile(const WorkloadArgs& args, const std::string& out, int reps, bool busy_grid);
// Where a measured table for this device and head configuration is kept.
std::string default_cost_table_path(const std::string& device, const HeadConfig& heads, DType dtype);
int run_plan(const WorkloadArgs& args, const std::string& target);

struct FuzzArgs {
  int count = 100;
  std::uint64_t seed = 1;
  std::string backend = "cpu";        // cpu or cuda
  int case_index = -1;                // ≥ 0: replay this one case
  std::string failures = "fuzz-failures";  // where failing cases' workloads are written
};
// Random forests against the fp64 reference, and random bad inputs that must
// be refused; prints each failure with its replay command, then "N passed, M
// failed"; exit code 1 if any failed.
int run_fuzz(const FuzzArgs& args);

}  // namespace codec::tools
