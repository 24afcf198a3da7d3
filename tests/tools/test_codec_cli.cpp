// The `codec` tool as a user runs it: its JSON output, the files `--dump`
// writes (which bench/peers.py rebuilds FlashInfer's inputs from), and its
// exit code and message on bad arguments.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "workload/workload.hpp"

namespace codec {
namespace {

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr
};

// `shell_prefix` runs before the tool in the same shell (a ulimit).
Result run_codec(const std::string& args, const std::string& shell_prefix = "") {
  const std::string command = shell_prefix + std::string(CODEC_TOOL_PATH) + " " + args + " 2>&1";
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::path(testing::TempDir()) / ("codec_cli_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CodecCli, PlanTakesACommaSeparatedListOfWorkloads) {
  const Result r = run_codec("plan --workload depth:2,seq:128 --target cpu --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json rows = nlohmann::json::parse(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_EQ(rows[0]["workload"], "depth:2");
  EXPECT_EQ(rows[1]["workload"], "seq:128");
  for (const auto& row : rows) EXPECT_GT(row["tasks"].get<int>(), 0);
}

// plan's table gives `reads`, the KV tokens the tasks read over the unique
// ones: 1 where no node has more rows than a task holds (flat:8 at four
// query tokens, 16 rows a request), above where each row tile of a node
// reads it again (loogle:8's documents at four tokens: 16 rows a question).
TEST(CodecCli, PlanTableGivesTheKvReadOverTheUnique) {
  const Result r = run_codec("plan --workload flat:8,loogle:8 --q-len 4 --target h200");
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream text(r.output);
  std::vector<std::vector<std::string>> lines;
  for (std::string line; std::getline(text, line);) {
    std::istringstream words(line);
    lines.emplace_back(std::istream_iterator<std::string>(words), std::istream_iterator<std::string>());
  }
  ASSERT_EQ(lines.size(), 3u) << r.output;
  const auto reads = [](const std::vector<std::string>& words) { return words[words.size() - 4]; };  // then merge, derive, plan
  EXPECT_EQ(reads(lines[0]), "reads") << r.output;
  EXPECT_EQ(reads(lines[1]), "1.00") << r.output;
  EXPECT_GT(std::stod(reads(lines[2])), 1.5) << r.output;
}

// The H200's floor is no yardstick for the CPU engine: a CPU run's table and
// JSON give none (its JSON keeps floor_ms, the workload's H200 floor).
TEST(CodecCli, CpuRunsShowNoH200Floor) {
  const Result table = run_codec("bench --backend cpu --workload depth:2 --scale 0.125 --reps 1");
  ASSERT_EQ(table.code, 0) << table.output;
  EXPECT_NE(table.output.find("no floor"), std::string::npos) << table.output;
  const Result json = run_codec("bench --backend cpu --workload depth:2 --scale 0.125 --reps 1 --json");
  ASSERT_EQ(json.code, 0) << json.output;
  const nlohmann::json rows = nlohmann::json::parse(json.output.substr(json.output.find("[\n")));  // after the progress lines
  EXPECT_TRUE(rows[0]["codec_over_floor"].is_null());
  EXPECT_GT(rows[0]["floor_ms"].get<double>(), 0);
}

// Several query tokens a request on the CPU engine: causal (--q-len) and a
// draft tree (--tree), checked against fp64; their rows and the dump's files.
TEST(CodecCli, QueryTokensRunAndDumpOnTheCpu) {
  for (const std::string& args : {std::string("--q-len 5"), std::string("--tree 3,2")}) {
    const auto dir = scratch("queries");
    const Result r = run_codec("bench --backend cpu --workload depth:3,loogle:4 --scale 0.05 --reps 1 --json " +
                               args + " --dump " + dir.string());
    ASSERT_EQ(r.code, 0) << args << "\n" << r.output;
    const nlohmann::json rows = nlohmann::json::parse(r.output.substr(r.output.find("[\n")));
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& row : rows) {
      EXPECT_EQ(row["q_len"], args == "--q-len 5" ? 5 : 6) << args;
      EXPECT_TRUE(row["pass"].get<bool>()) << args << " " << row;
    }
    EXPECT_TRUE(std::filesystem::exists(dir / "depth:3" / "qo_indptr.npy")) << args;
    EXPECT_EQ(std::filesystem::exists(dir / "depth:3" / "mask_bits.npy"), args != "--q-len 5") << args;
    std::filesystem::remove_all(dir);
  }
  const Result plan = run_codec("plan --workload loogle:8 --q-len 4 --target h200 --json");
  ASSERT_EQ(plan.code, 0) << plan.output;
  const nlohmann::json p = nlohmann::json::parse(plan.output);
  EXPECT_EQ(p[0]["query_rows"].get<int>(), 4 * p[0]["requests"].get<int>());
  for (const auto& [args, named] : {std::pair{"--tree 4", "--tree '4' is not W,D"},
                                    {"--tree 0,3", "--tree 0,3: width and depth must be >= 1"},
                                    {"--q-len 2 --tree 2,2", "--q-len and --tree: give one"}}) {
    const Result bad = run_codec(std::string("plan --workload depth:2 ") + args);
    EXPECT_EQ(bad.code, 2) << args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(named), std::string::npos) << args << "\n" << bad.output;
  }
}

// The variants (--window, --soft-cap, --sinks) on the CPU engine against
// fp64, with several query tokens too: their rows, label and dump; a window
// reads a window (the window workload reads the document's last pages, and
// its floor counts the keys some row sees); a bad window is refused by name.
TEST(CodecCli, VariantsRunAndDumpOnTheCpu) {
  const auto dir = scratch("variants");
  const Result r = run_codec("bench --backend cpu --workload long,depth:3 --scale 0.05 --reps 1 --json --window 40 "
                             "--soft-cap 20 --sinks --q-len 3 --dump " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json rows = nlohmann::json::parse(r.output.substr(r.output.find("[\n")));
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_TRUE(row["pass"].get<bool>()) << row;
    EXPECT_EQ(row["window_left"], 39);
    EXPECT_EQ(row["logits_soft_cap"], 20.0);
    EXPECT_TRUE(row["sinks"].get<bool>());
    EXPECT_LT(row["seen_kv_tokens"].get<std::int64_t>(), row["unique_kv_tokens"].get<std::int64_t>()) << row;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "long" / "sinks.npy"));
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir / "long" / "meta.json"));
  EXPECT_EQ(meta["window_left"], 39);
  std::filesystem::remove_all(dir);
  const Result table = run_codec("bench --backend cpu --workload long --scale 0.05 --reps 1 --window 40 --soft-cap 20 --sinks");
  ASSERT_EQ(table.code, 0) << table.output;
  EXPECT_NE(table.output.find("long w40 c20 s"), std::string::npos) << table.output;
  const Result window = run_codec("bench --backend cpu --workload window --scale 0.0625 --reps 1 --json");
  ASSERT_EQ(window.code, 0) << window.output;
  const nlohmann::json w = nlohmann::json::parse(window.output.substr(window.output.find("[\n")))[0];
  EXPECT_EQ(w["window_left"], 4095);
  EXPECT_LT(w["codec_kv_mb"].get<double>(), 0.6 * w["unique_kv_mb"].get<double>()) << w;  // half the document unread
  EXPECT_LT(w["codec_kv_mb"].get<double>(), 1.01 * w["seen_kv_mb"].get<double>()) << w;   // a page more at most
  const Result bad = run_codec("plan --workload depth:2 --window 0");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--window"), std::string::npos) << bad.output;
}

// An fp8 cache (codec bench --dtype fp8 / fp8_e5m2) on the CPU engine: half the
// KV bytes of bf16, checked against the fp64 reference of the dequantised
// values; the dump keeps the stored bits and the scales. The H200 target
// plans it with wide tasks, as a 16-bit cache.
TEST(CodecCli, Fp8CachesRunAndDumpOnTheCpu) {
  const auto dir = scratch("fp8");
  double bf16_mb = 0;
  for (const std::string dtype : {"bf16", "fp8", "fp8_e5m2"}) {
    const Result r = run_codec("bench --backend cpu --workload depth:3 --scale 0.05 --reps 1 --json --dtype " + dtype +
                               (dtype == "fp8" ? " --q-len 3 --dump " + dir.string() : std::string()));
    ASSERT_EQ(r.code, 0) << dtype << "\n" << r.output;
    const nlohmann::json row = nlohmann::json::parse(r.output.substr(r.output.find("[\n")))[0];
    EXPECT_TRUE(row["pass"].get<bool>()) << dtype << " " << row;
    if (dtype == "bf16") bf16_mb = row["codec_kv_mb"].get<double>();
    if (dtype == "fp8_e5m2") {  // the same tokens as bf16's, a byte each
      EXPECT_NEAR(row["codec_kv_mb"].get<double>(), bf16_mb / 2, 1e-3 * bf16_mb);
    }
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "k_scale.npy") && std::filesystem::exists(dir / "v_scale.npy"));
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  EXPECT_EQ(meta["dtype"], "fp8_e4m3");
  EXPECT_EQ(meta["q_dtype"], "bf16");
  std::filesystem::remove_all(dir);
  for (const std::string dtype : {"bf16", "fp8"}) {  // dense:2's rows go wide
    const Result h200 = run_codec("plan --workload dense:2 --target h200 --json --dtype " + dtype);
    ASSERT_EQ(h200.code, 0) << h200.output;
    const nlohmann::json p = nlohmann::json::parse(h200.output)[0];
    EXPECT_GT(p["wide_tasks"].get<int>(), 0) << dtype << " " << p;
  }
}

// A .npy file of bytes as numpy writes it (format 1.0): descr "|u1" or "|b1".
void write_npy_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& data, const char* descr) {
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(data.size()) + ",), }";
  header.append((10 + header.size() + 1 + 63) / 64 * 64 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(char(header.size() & 0xff)).put(char(header.size() >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

std::vector<std::uint8_t> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// --custom-mask: a bool array (FlashInfer's custom_mask) and the same bits
// packed (its packed_custom_mask) give the same mask, which reaches the plan,
// the run and the dump; files of the wrong size or dtype are refused by name.
TEST(CodecCli, CustomMaskFilesOfBoolsOrPackedBits) {
  const Workload w = builtin_workload("depth:3").scaled(0.05).with_queries(3);
  std::vector<std::uint8_t> bools, packed;
  std::uint32_t state = 7;
  for (int r = 0; r < int(w.requests.size()); ++r) {
    const std::int64_t n = 3 * w.request_tokens(r), base = std::int64_t(packed.size()) * 8;
    packed.resize(packed.size() + std::size_t((n + 7) / 8), 0);
    for (std::int64_t k = 0; k < n; ++k) {
      state = state * 1664525u + 1013904223u;
      bools.push_back(std::uint8_t(state >> 31));
      if (bools.back()) packed[std::size_t((base + k) / 8)] |= std::uint8_t(1u << ((base + k) % 8));
    }
  }
  const auto dir = scratch("custom_mask");
  std::filesystem::create_directories(dir);
  write_npy_bytes(dir / "bools.npy", bools, "|b1");
  write_npy_bytes(dir / "packed.npy", packed, "|u1");
  for (const char* file : {"bools", "packed"}) {
    const Result r = run_codec("bench --backend cpu --workload depth:3 --scale 0.05 --reps 1 --json --q-len 3 "
                               "--custom-mask " + (dir / file).string() + ".npy --dump " + (dir / file).string());
    ASSERT_EQ(r.code, 0) << file << "\n" << r.output;
    const nlohmann::json rows = nlohmann::json::parse(r.output.substr(r.output.find("[\n")));
    EXPECT_EQ(rows[0]["mask"], "custom") << file;
    EXPECT_TRUE(rows[0]["pass"].get<bool>()) << rows[0];
    EXPECT_EQ(read_json(dir / file / "meta.json")["mask"], "custom") << file;
    const std::vector<std::uint8_t> dumped = file_bytes(dir / file / "mask_bits.npy");
    ASSERT_GE(dumped.size(), packed.size()) << file;
    EXPECT_TRUE(std::equal(packed.begin(), packed.end(), dumped.end() - std::ptrdiff_t(packed.size()))) << file;
  }
  write_npy_bytes(dir / "short.npy", std::vector<std::uint8_t>(packed.begin(), packed.end() - 1), "|u1");
  write_npy_bytes(dir / "f2.npy", {0, 0}, "<f2");
  std::ofstream(dir / "text.npy") << "not numpy";
  const std::string packed_bytes = std::to_string(packed.size()), short_bytes = std::to_string(packed.size() - 1);
  for (const auto& [args, named] :
       {std::pair{"--q-len 3 --custom-mask " + (dir / "short.npy").string(),
                  "custom mask of " + short_bytes + " bytes; the " + std::to_string(w.requests.size()) +
                      " requests' [q_len 3, kv_len] matrices take " + packed_bytes},
        {"--q-len 3 --custom-mask " + (dir / "f2.npy").string(), "dtype '<f2'; expected uint8 or bool"},
        {"--q-len 3 --custom-mask " + (dir / "text.npy").string(), "is not a .npy file"},
        {"--q-len 3 --custom-mask " + (dir / "none.npy").string(), "cannot read"},
        {"--tree 2,2 --custom-mask " + (dir / "packed.npy").string(), "--custom-mask and --tree: give one"}}) {
    const Result bad = run_codec("plan --workload depth:3 --scale 0.05 " + args);
    EXPECT_EQ(bad.code, 2) << args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(named), std::string::npos) << args << "\n" << bad.output;
  }
  std::filesystem::remove_all(dir);
}

// Plans for the H200 made without a GPU use the grid the kernel would run:
// 132 SMs × 4 PAC blocks at head_dim 64, × 2 at 128 and 256.
TEST(CodecCli, OfflineH200PlansUseTheKernelsBlocksPerSm) {
  for (const auto& [model, blocks] : {std::pair{"llama3.2-1b", 528}, {"qwen3-4b", 264}, {"gemma2-9b", 264}}) {
    const Result r = run_codec(std::string("plan --workload depth:2 --target h200 --json --model ") + model);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output)[0]["blocks"], blocks) << model;
  }
}

// The wide workloads on the committed H200 table (docs/DESIGN_NOTES.md,
// Planner 13). Priced as if every block were busy beside the wide kernel,
// batch:32's and batch:64's roots fill every SM with a wide task; at the
// target's price of PAC tasks beside it (0.6) 44 SMs of batch:32 and 36 of
// batch:64 stream the leaves from the start, and long takes 120 wide tasks:
// batch:32's plan ran 1.089× faster than every SM on the root (run 36),
// batch:64's in 0.929× the time of 176 wide tasks at 0.8, long's 1.007× its
// 112 (run 44).
TEST(CodecCli, BesideWidePriceLeavesSmsToTheLeaves) {
  auto wide_tasks = [](const std::string& workload, const std::string& extra) {
    const Result r = run_codec("plan --workload " + workload + " --target h200 --json" + extra);
    EXPECT_EQ(r.code, 0) << r.output;
    return r.code == 0 ? nlohmann::json::parse(r.output)[0]["wide_tasks"].get<int>() : -1;
  };
  EXPECT_EQ(wide_tasks("batch:32", ""), 88);
  EXPECT_EQ(wide_tasks("batch:32", " --beside-wide 0.8"), 88);
  EXPECT_EQ(wide_tasks("batch:32", " --beside-wide 1"), 128);
  EXPECT_EQ(wide_tasks("batch:64", ""), 96);  // the root on 96 SMs, the leaves on the other 36 from the start
  EXPECT_EQ(wide_tasks("batch:64", " --beside-wide 0.8"), 176);
  EXPECT_EQ(wide_tasks("batch:64", " --beside-wide 1"), 128);
  EXPECT_EQ(wide_tasks("long", ""), 120);
  EXPECT_EQ(wide_tasks("long", " --beside-wide 0.8"), 112);
  // at head_dim 64 a masked node of more than 2,048 rows stays off the wide kernel (a 1,024-token causal chunk's own
  // node: 4,096), an unmasked one does not (gpt-oss-20b's system prompt: 4,096)
  EXPECT_EQ(wide_tasks("shape:DT --model llama3.2-1b --q-len 1024", ""), 0);
  EXPECT_GT(wide_tasks("shape:DT --model llama3.2-1b --q-len 1024", " --wide-max-masked-rows 0"), 0);
  EXPECT_GT(wide_tasks("shape:DT --model llama3.2-1b --q-len 512", ""), 0);  // 2,048 rows
  EXPECT_EQ(wide_tasks("shape:DT --model llama3.2-1b --q-len 512", " --wide-max-masked-rows 2047"), 0);
  EXPECT_GT(wide_tasks("sysprompt:512 --model gpt-oss-20b", ""), 0);
  EXPECT_EQ(wide_tasks("sysprompt:512 --model gpt-oss-20b", " --wide off"), 0);
  const Result negative = run_codec("plan --workload batch:32 --target h200 --wide-max-masked-rows -1");
  EXPECT_NE(negative.code, 0);
  EXPECT_NE(negative.output.find("--wide-max-masked-rows"), std::string::npos) << negative.output;
  for (const char* bad : {"0", "0.2", "1.5", "-0.5"}) {
    const Result r = run_codec(std::string("plan --workload batch:32 --target h200 --beside-wide ") + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.output.find("--beside-wide"), std::string::npos) << r.output;
  }
}

// The int32 payload of a 1-D .npy file as bench --dump writes it (format 1.0,
// '<i4'); a test failure if it is anything else.
std::vector<std::int32_t> read_npy_i32(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 8, "\x93NUMPY\x01\x00", 8) != 0) {
    ADD_FAILURE() << path << ": not a version 1.0 .npy file";
    return {};
  }
  const std::size_t header = std::uint8_t(bytes[8]) | std::size_t(std::uint8_t(bytes[9])) << 8;
  const std::string dict = bytes.substr(10, header);
  EXPECT_NE(dict.find("'descr': '<i4'"), std::string::npos) << path << ": " << dict;
  std::vector<std::int32_t> values((bytes.size() - 10 - header) / 4);
  std::memcpy(values.data(), bytes.data() + 10 + header, values.size() * 4);
  const std::string shape = "'shape': (" + std::to_string(values.size()) + ", )";
  EXPECT_NE(dict.find(shape), std::string::npos) << path << ": " << dict;
  return values;
}

// The dump must hold the very page tables the run used, as FlashInfer's
// arrays (kv_indptr, kv_indices, kv_last_page_len) and as forest.json: each
// request's pages are its path's node pages, root first, and its length their
// tokens; meta.json names the shapes.
TEST(CodecCli, DumpedForestRebuildsEveryRequestsPageList) {
  const auto dir = scratch("dump");
  const Result r = run_codec("bench --backend cpu --workload depth:3 --scale 0.0625 --reps 1 --dump " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* file : {"meta.json", "q.npy", "k_cache.npy", "v_cache.npy", "kv_indptr.npy", "kv_indices.npy",
                           "kv_last_page_len.npy", "out.npy", "out_flat.npy", "lse.npy"})
    EXPECT_TRUE(std::filesystem::exists(dir / file)) << file;
  const nlohmann::json forest = read_json(dir / "forest.json");
  const nlohmann::json& nodes = forest["nodes"];

  const Workload w = resolve_workload("depth:3").scaled(0.0625);
  const WorkloadTables t = workload_page_tables(w);
  const int requests = int(t.tables.indptr.size()) - 1;
  EXPECT_EQ(read_npy_i32(dir / "kv_indptr.npy"), t.tables.indptr);
  EXPECT_EQ(read_npy_i32(dir / "kv_indices.npy"), t.tables.indices);
  EXPECT_EQ(read_npy_i32(dir / "kv_last_page_len.npy"), t.tables.last_page_len);
  const nlohmann::json meta = read_json(dir / "meta.json");
  EXPECT_EQ(meta["workload"], "depth:3");
  EXPECT_EQ(meta["dtype"], "bf16");
  EXPECT_EQ(meta["page_size"], t.page_size);
  EXPECT_EQ(meta["num_qo_heads"], w.heads.num_qo_heads);
  EXPECT_EQ(meta["num_kv_heads"], w.heads.num_kv_heads);
  EXPECT_EQ(meta["head_dim"], w.heads.head_dim);
  EXPECT_NEAR(meta["sm_scale"].get<double>(), 1 / std::sqrt(double(w.heads.head_dim)), 1e-7);
  ASSERT_EQ(int(forest["request_node"].size()), requests);
  for (int req = 0; req < requests; ++req) {
    std::vector<int> path;
    for (int n = forest["request_node"][req]; n >= 0; n = nodes[n]["parent"]) path.insert(path.begin(), n);
    std::vector<std::int32_t> pages;
    std::int64_t tokens = 0;
    for (const int n : path) {
      const std::vector<std::int32_t> node_pages = nodes[n]["pages"];
      const std::vector<std::int32_t> node_reqs = nodes[n]["reqs"];
      EXPECT_NE(std::find(node_reqs.begin(), node_reqs.end(), req), node_reqs.end()) << "node " << n << " req " << req;
      pages.insert(pages.end(), node_pages.begin(), node_pages.end());
      tokens += nodes[n]["num_tokens"].get<int>();
    }
    const std::vector<std::int32_t> expect(t.tables.indices.begin() + t.tables.indptr[req],
                                           t.tables.indices.begin() + t.tables.indptr[req + 1]);
    EXPECT_EQ(pages, expect) << "request " << req;
    const std::int64_t length =
        std::int64_t(t.tables.indptr[req + 1] - t.tables.indptr[req] - 1) * t.page_size + t.tables.last_page_len[req];
    EXPECT_EQ(tokens, length) << "request " << req;
  }
  std::filesystem::remove_all(dir);
}

TEST(CodecCli, BadArgumentsExitWith2AndNameTheValue) {
  struct Case {
    const char* args;
    const char* named;  // what the message must mention
  };
  for (const Case& c : {Case{"plan --workload nosuch:3", "nosuch"},
                        Case{"plan --workload depth:2,,seq:128", "empty entry"},
                        Case{"bench --backend cpu --workload depth:2 --split fixed:0", "fixed:0"},
                        Case{"plan --workload depth:2 --page-size 0", "page-size"},
                        Case{"bench --workload depth:2 --page-size -5", "must be a number >= 1 and <= 1048576, not '-5'"},
                        Case{"bench --workload depth:2 --scale 0", "--scale: must be a number > 0"},
                        Case{"bench --workload depth:2 --blocks -1e300", "not '-1e300'"},
                        Case{"bench --workload depth:2 --flush dirty", "dirty"},
                        Case{"plan --workload depth:2 --wide bogus", "--wide 'bogus'"},
                        Case{"plan --workload depth:2 --split fast", "--split 'fast' is not one of"},
                        Case{"plan --workload depth:2 --split adaptive,none", "plan takes one policy"},
                        Case{"fuzz --count 0", "--count: must be a number >= 1"}}) {
    const Result r = run_codec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.named), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("179769313486"), std::string::npos) << "DBL_MAX in the message: " << r.output;
    EXPECT_EQ(r.output.find(".cpp:"), std::string::npos) << "a source location in a user's message: " << r.output;
    EXPECT_EQ(r.output.find("makespan_us"), std::string::npos) << "refused after plan's table began: " << r.output;
  }
}

// Inputs that would take more host memory than allowed, or outputs that
// cannot be written, are refused before any work (exit 2, in milliseconds).
TEST(CodecCli, RefusesOversizedWorkloadsAndUnwritableOutputsBeforeWork) {
  const auto dir = scratch("bounded");
  std::filesystem::create_directories(dir);
  const auto big = dir / "big.json";
  std::ofstream(big) << R"({"name": "big", "nodes": [{"id": "a", "parent": null, "tokens": 2000000000}],
                           "requests": [{"node": "a"}]})";
  struct Case {
    std::string args, named;
  };
  for (const Case& c : {Case{"plan --workload " + big.string(), "needs about 29.5 GB of host memory"},
                        Case{"plan --workload " + big.string() + " --max-memory 4", "more than --max-memory 4 GB"},
                        Case{"bench --backend cpu --workload depth:2 --page-size 1000000", "GB of K, V and queries"},
                        Case{"bench --backend cpu --workload depth:2 --dump /proc/codec_x", "--dump: cannot write"},
                        Case{"bench --backend cpu --workload depth:2 --save " + (dir / "no/such.json").string(),
                             "--save: cannot write"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = run_codec(c.args);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.named), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_LT(seconds, 5.0) << c.args << ": refused only after work";
    EXPECT_EQ(r.output.find("building the batch"), std::string::npos) << c.args << ": refused only after work";
  }
  // --verbose gives developers the source location.
  const Result v = run_codec("--verbose plan --workload nosuch:3");
  EXPECT_EQ(v.code, 2);
  EXPECT_NE(v.output.find(".cpp:"), std::string::npos) << v.output;
}

// Files a user was handed, valid JSON but nested far deeper than any stack
// recursion survives (120,000 levels, 240 KB), at the top level or inside a
// field, as workloads and as a cost table: exit 2 naming the file and the
// limit, quickly, under a 4 GB address-space limit (AddressSanitizer's
// shadow memory needs more, so its build runs without the limit).
TEST(CodecCli, DeeplyNestedFilesExitWith2UnderAMemoryLimit) {
  const auto dir = scratch("deep");
  std::filesystem::create_directories(dir);
  const std::string deep = std::string(120000, '[') + std::string(120000, ']');
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string top = write("top.json", deep);
  const std::string in_model = write("model.json", R"({"model": )" + deep + "}");
  const std::string table = write("table.json", R"({"device": "x", "head_dim": 128, "dtype": "bf16", "rows": )" + deep + "}");
#ifdef __SANITIZE_ADDRESS__
  const std::string limit;
#else
  const std::string limit = "ulimit -v 4194304; ";
#endif
  for (const std::string& args :
       {"plan --workload " + top, "bench --backend cpu --workload " + top, "plan --workload " + in_model,
        "bench --backend cpu --workload " + in_model, "plan --workload depth:2 --cost-table " + table,
        "bench --backend cpu --workload depth:2 --cost-table " + table}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = run_codec(args, limit);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(".json: arrays and objects nested 65 levels deep, past the limit of 64"), std::string::npos)
        << args << "\n" << r.output;
    EXPECT_LT(r.output.size(), 400u) << "the message quotes the input: " << r.output;
    EXPECT_LT(seconds, 5.0) << args;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace codec
