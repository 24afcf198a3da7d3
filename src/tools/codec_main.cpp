// codec: run CoDec on built-in or JSON workloads, compare it with the flat
// baseline and the fp64 reference, and show plan statistics.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "codec/core/error.hpp"
#include "commands.hpp"

namespace {

// A number in [lo, hi] (lo excluded when lo_open). CLI11's own PositiveNumber
// names its range up to DBL_MAX, 309 digits; this names the real bounds.
CLI::Validator in_range(double lo, double hi, bool lo_open = false) {
  const auto show = [](double x) {
    std::ostringstream os;
    os << std::setprecision(12) << x;
    return os.str();
  };
  const std::string range = (lo_open ? "> " : ">= ") + show(lo) + " and <= " + show(hi);
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(value.c_str(), &end);
        const bool ok = end != value.c_str() && *end == '\0' && std::isfinite(x) && (lo_open ? x > lo : x >= lo) &&
                        x <= hi;
        if (ok) return {};
        return "must be a number " + range + ", not '" + (value.size() > 40 ? value.substr(0, 40) + "..." : value) +
               "'";
      },
      "NUMBER " + range);
}

void add_workload_options(CLI::App* cmd, codec::tools::WorkloadArgs& w) {
  cmd->add_option("--workload,-w", w.workload, "Built-in workload (e.g. batch:64, seq:512), a JSON file, 'all', or a comma-separated list of these")
      ->capture_default_str();
  cmd->add_option("--model", w.model, "Model shape from docs/BENCHMARKS.md (qwen3-4b, llama3.2-1b, ...)");
  cmd->add_option("--dtype", w.dtype, "KV and query dtype: bf16, fp16 or fp32; or an fp8 KV cache (fp8 or fp8_e4m3, "
                                      "fp8_e5m2) with a scale a kv head drawn from the seed, under bf16 queries");
  cmd->add_option("--page-size", w.page_size, "Tokens per KV page")->check(in_range(1, 1 << 20));
  cmd->add_option("--scale", w.scale, "Multiply every node's token count (default: 1 on a GPU, 1/16 on the CPU)")
      ->check(in_range(0, 1e6, true));
  cmd->add_option("--q-len", w.q_len, "Query tokens a request, the last of its KV, causal (each request's last "
                                      "node grows by q_len - 1 tokens; default 1: decode)")
      ->check(in_range(1, 1 << 16));
  cmd->add_option("--tree", w.tree, "A draft tree of each request's query tokens: W,D for D levels of W tokens, "
                                    "each token's parent drawn from the level above (W x D tokens; 4,4 is 16)");
  cmd->add_option("--custom-mask", w.custom_mask,
                  ".npy file of a custom mask over each request's [q_len, kv_len] keys, requests concatenated: bool "
                  "(FlashInfer's custom_mask) or uint8 packed in little bit order, each request from a byte "
                  "boundary (its packed_custom_mask)");
  cmd->add_option("--window", w.window, "A sliding window of N keys up to each query token's own (window_left N - 1, "
                                        "transformers' sliding_window N; --scale leaves it as it is)")
      ->check(in_range(1, 1 << 30));
  cmd->add_option("--soft-cap", w.soft_cap, "A logit soft-cap C: each logit s becomes C tanh(s / C) (Gemma 2's 50)")
      ->check(in_range(0, 1e6, true));
  cmd->add_flag("--sinks", w.sinks, "Attention sinks (gpt-oss's), one logit a qo head drawn from the seed");
  cmd->add_option("--cost-table", w.cost_table,
                  "Cost table file measured by 'codec profile', or 'roofline' (default: the table measured on "
                  "this GPU under data/cost_tables if there is one, else the roofline)");
  cmd->add_option("--blocks", w.blocks, "Planner blocks m (default: the backend's; a count that is not whole wide "
                                          "blocks plans no wide tasks)")
      ->check(in_range(1, 1 << 20));
  cmd->add_option("--wide", w.wide, "Wide tasks (nodes of more than 64 rows on the wide kernel): auto, where the "
                                    "target runs them (sm_90 at head_dim 64 or 128), or off; bench takes a list "
                                    "(auto,off: a row each)")
      ->capture_default_str();
  cmd->add_option("--tail-tokens", w.tail_tokens,
                  "Most tokens of a request's private tail that its wide parent takes in (default: the target's, "
                  "16 on the wide kernel; 0: none)")
      ->check(in_range(0, 1 << 20));
  cmd->add_option("--wide-max-masked-rows", w.wide_max_masked_rows,
                  "Most query rows a kv head a masked node (some row sees less than all of it: causal chunks, "
                  "windows, mask bits) may have for wide tasks (default: the target's, 2048 at head_dim 64; 0: any)")
      ->check(in_range(0, 1 << 30));
  cmd->add_option("--wide-max-chunk", w.wide_max_chunk,
                  "Most KV tokens of a wide task's chunk after the adaptive and exhaustive split searches, where "
                  "the model prices the cut plan within 2% (default: the target's, 65536 on the wide kernel; 0: any)")
      ->check(in_range(0, 1 << 30));
  cmd->add_option("--price-tile", w.price_tile,
                  "Tokens of the kernel's KV tile: a task past one tile is priced at whole tiles (default: the "
                  "target's, 64 on the H200, 32 at head_dim 256; 0: at its length)")
      ->check(in_range(0, 1 << 20));
  cmd->add_option("--beside-wide", w.beside_wide,
                  "Price of PAC tasks while wide tasks run, relative to the cost table's, in batches of one query "
                  "token a request (default: the target's, 0.6 on the wide kernel; 1: as with every block busy); "
                  "batches of more take 1")
      ->check(in_range(codec::kMinBesideWidePrice, 1));
  cmd->add_option("--max-memory", w.max_memory_gb,
                  "Host memory in GB a workload may take (page tables, and for bench its KV pool); refused beyond")
      ->check(in_range(0, 1e6, true))
      ->capture_default_str();
  cmd->add_option("--split", w.split, "CoDec plan's KV splitting: adaptive, none, fixed:K, exhaustive")
      ->capture_default_str();
  cmd->add_flag("--json", w.json, "Print JSON instead of a table");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CoDec: prefix-shared decode attention"};
  app.require_subcommand(1);
  codec::tools::WorkloadArgs bench_w, plan_w;
  codec::tools::BenchArgs bench;
  std::string target = "h200";

  CLI::App* bench_cmd = app.add_subcommand("bench", "Run CoDec and the flat baseline, verify against fp64, time both");
  add_workload_options(bench_cmd, bench_w);
  bench_cmd->add_option("--backend", bench.backend, "auto (the GPU when there is one), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  bench_cmd->add_option("--threads", bench.threads, "CPU threads (default: all)")->check(in_range(0, 4096));
  bench_cmd->add_option("--reps", bench.reps, "Timed repetitions, median reported (default: 30 on a GPU, 5 on the CPU)")
      ->check(in_range(1, 1e6));
  bench_cmd->add_option("--flush", bench.flush,
                        "How L2 is flushed before each timed GPU run: read (a 256 MB read; L2 left clean, as after "
                        "a decode step's QKV projection) or write (a 256 MB memset; its dirty lines are written back "
                        "during the run)")
      ->check(CLI::IsMember({"read", "write"}))
      ->capture_default_str();
  bench_cmd->add_option("--dump", bench.dump, "Write inputs and outputs as .npy files into this folder");
  bench_cmd->add_option("--save", bench.save, "Also write the result rows as JSON to this file");

  CLI::App* plan_cmd = app.add_subcommand("plan", "Plan statistics, without generating KV data");
  add_workload_options(plan_cmd, plan_w);
  plan_cmd->add_option("--target", target, "Device the plan is for: h200 or cpu")
      ->check(CLI::IsMember({"h200", "cpu"}))
      ->capture_default_str();

  codec::tools::WorkloadArgs profile_w;
  std::string profile_out;
  int profile_reps = 10;
  bool profile_busy = false;
  CLI::App* profile_cmd =
      app.add_subcommand("profile", "Measure the PAC kernel on this GPU and write the planner's cost table");
  profile_cmd->add_option("--model", profile_w.model, "Model shape (default qwen3-4b)");
  profile_cmd->add_option("--dtype", profile_w.dtype,
                          "bf16, fp16, or an fp8 cache under bf16 queries: fp8 (e4m3), fp8_e5m2 (default bf16)");
  profile_cmd->add_option("--page-size", profile_w.page_size, "Tokens per KV page (default 16)")
      ->check(in_range(1, 1 << 20));
  profile_cmd->add_option("--out", profile_out, "Table file (default: data/cost_tables/<device>_d<D>_<dtype>.json)");
  profile_cmd->add_option("--reps", profile_reps, "Timed repetitions per grid point")->check(in_range(1, 1e6));
  profile_cmd->add_flag("--busy-grid", profile_busy,
                        "Also time the task grid with m/64 to m/2 blocks busy, for contention pricing (measured not to "
                        "pay on the H200 yet: docs/DESIGN_NOTES.md, Planner 11)");

  codec::tools::FuzzArgs fuzz;
  CLI::App* fuzz_cmd =
      app.add_subcommand("fuzz", "Random forests against the fp64 reference, and bad inputs that must be refused");
  fuzz_cmd->add_option("--count", fuzz.count, "Cases to run")->check(in_range(1, 1e9))->capture_default_str();
  fuzz_cmd->add_option("--seed", fuzz.seed, "Seed: case i of a seed is always the same case")->capture_default_str();
  fuzz_cmd->add_option("--backend", fuzz.backend, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  fuzz_cmd->add_option("--case", fuzz.case_index, "Replay this one case")->check(in_range(0, 1e9));
  fuzz_cmd->add_option("--failures", fuzz.failures, "Folder for failing cases' workload files")->capture_default_str();

  bool verbose = false;
  app.add_flag("--verbose", verbose, "Errors name the source location that raised them (for developers)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (verbose) codec::set_error_locations(true);
  try {
    if (*bench_cmd) return codec::tools::run_bench(bench_w, bench);
    if (*fuzz_cmd) return codec::tools::run_fuzz(fuzz);
    if (*profile_cmd) {
#if CODEC_HAS_CUDA
      return codec::tools::run_profile(profile_w, profile_out, profile_reps, profile_busy);
#else
      throw codec::Error("codec profile: this build has no CUDA engine");
#endif
    }
    return codec::tools::run_plan(plan_w, target);
  } catch (const codec::Error& e) {
    std::cerr << "codec: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "codec: failure: " << e.what() << "\n";
    return 1;
  }
}
