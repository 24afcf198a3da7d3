// The scenarios of docs/BENCHMARKS.md ("Workloads"), at full size: tests scale them
// down with Workload::scaled.
#include <charconv>
#include <cmath>
#include <random>
#include <string_view>

#include "codec/core/error.hpp"
#include "workload/workload.hpp"

namespace codec {

namespace {

// The generic parameters' ranges: wide enough for any sensible sweep point,
// narrow enough that a typo cannot ask for millions of nodes.
constexpr std::int64_t kMaxTokens = std::int64_t(1) << 26;
constexpr std::int64_t kMaxRequests = std::int64_t(1) << 16;

constexpr const char* kKnown =
    "seq[:L], batch[:B], depth[:d], ratio[:r], shape[:k|DT], long, loogle[:n], fewshot, flat[:B], sysprompt[:B], "
    "dense[:D], verify[:B], window[:N]";

std::int32_t add_node(Workload& w, std::string id, std::int32_t parent, std::int64_t tokens) {
  w.nodes.push_back({std::move(id), parent, tokens});
  return std::int32_t(w.nodes.size()) - 1;
}

// `roots` full trees of fan-out `fanout`, level l's nodes holding level_tokens[l]
// tokens each; every node of the last level ends one request. Node ids name the
// level and the position in it: "n2.5".
void add_forest(Workload& w, std::int64_t roots, std::int64_t fanout, const std::vector<std::int64_t>& level_tokens) {
  std::vector<std::int32_t> level;
  std::int64_t width = roots;
  int depth = 0;
  for (std::int64_t tokens : level_tokens) {
    std::vector<std::int32_t> next;
    next.reserve(std::size_t(width));
    for (std::int64_t i = 0; i < width; ++i) {
      const std::int32_t parent = level.empty() ? -1 : level[std::size_t(i / fanout)];
      std::string id = "n";  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "n" + std::string
      id += std::to_string(depth) + "." + std::to_string(i);
      next.push_back(add_node(w, std::move(id), parent, tokens));
    }
    level = std::move(next);
    width *= fanout;
    ++depth;
  }
  w.requests.insert(w.requests.end(), level.begin(), level.end());
}

// `or_else` names a non-numeric alternative for the message ("DT").
std::int64_t parse_int(std::string_view name, std::string_view param, std::int64_t lo, std::int64_t hi,
                       std::string_view or_else = "") {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(param.data(), param.data() + param.size(), value);
  CODEC_CHECK(ec == std::errc() && end == param.data() + param.size() && value >= lo && value <= hi,
              "workload '", name, "': parameter '", param, "' is not an integer in [", lo, ", ", hi, "]",
              or_else.empty() ? "" : " or ", or_else);
  return value;
}

double parse_ratio(std::string_view param) {
  double value = 0;
  const auto [end, ec] = std::from_chars(param.data(), param.data() + param.size(), value);
  CODEC_CHECK(ec == std::errc() && end == param.data() + param.size() && value >= 0 && value <= 1,
              "workload 'ratio': parameter '", param, "' is not a number in [0, 1]");
  return value;
}

// LooGLE-like documents: length spread over 10k–40k tokens with mean 24k (a
// triangular distribution with mode 22k: mean (10k + 22k + 40k) / 3 = 24k;
// a uniform one would have mean 25k), each with 4–19 questions of 30–200 tokens
// plus 0–256 generated tokens.
// Draws with mt19937_64, whose output the standard fixes, and our own range
// mapping (std's distributions differ between libraries), so that a seed gives
// the same workload everywhere.
struct Draw {
  std::mt19937_64 rng;
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {  // modulo bias < 2^-40 for these ranges
    return lo + std::int64_t(rng() % std::uint64_t(hi - lo + 1));
  }
};

void add_loogle(Workload& w, std::int64_t documents) {
  Draw draw{std::mt19937_64(w.seed)};
  auto uniform = [&](std::int64_t lo, std::int64_t hi) { return draw.uniform(lo, hi); };
  auto triangular = [&](double lo, double mode, double hi) {
    const double u = double(draw.rng() >> 11) * 0x1p-53;
    const double split = (mode - lo) / (hi - lo);
    return u < split ? lo + std::sqrt(u * (hi - lo) * (mode - lo))
                     : hi - std::sqrt((1 - u) * (hi - lo) * (hi - mode));
  };
  for (std::int64_t d = 0; d < documents; ++d) {
    const std::string doc = "doc" + std::to_string(d);
    const std::int32_t parent = add_node(w, doc, -1, std::llround(triangular(10000, 22000, 40000)));
    const std::int64_t questions = uniform(4, 19);
    for (std::int64_t q = 0; q < questions; ++q) {
      const std::int64_t tokens = uniform(30, 200) + uniform(0, 256);
      w.requests.push_back(add_node(w, doc + ".q" + std::to_string(q), parent, tokens));
    }
  }
}

// One 4096-token system prompt shared by B requests, each with 1–16 private
// tokens: a serving engine's most common decode batch (a short user turn, or
// the tokens generated so far, past a long shared instruction).
void add_sysprompt(Workload& w, std::int64_t requests) {
  Draw draw{std::mt19937_64(w.seed)};
  const std::int32_t prompt = add_node(w, "prompt", -1, 4096);
  for (std::int64_t r = 0; r < requests; ++r) {
    std::string id = "r";  // appended piecewise, as in add_forest
    id += std::to_string(r);
    w.requests.push_back(add_node(w, std::move(id), prompt, draw.uniform(1, 16)));
  }
}

// D documents of 32,768 / D tokens, each the whole context of 512 / D
// requests, with no tokens of their own. At D = 2 and 4 every node is read by
// 1,024 or 512 query rows a kv head: a prefill-shaped, compute-bound decode
// step (the wide kernel's tile-loop target, docs/BENCHMARKS.md).
void add_dense(Workload& w, std::int64_t documents) {
  CODEC_CHECK(512 % documents == 0, "workload 'dense': parameter '", documents,
              "' does not divide 512 (the requests, shared equally by the documents)");
  for (std::int64_t d = 0; d < documents; ++d) {
    std::string id = "doc";  // appended piecewise, as in add_forest
    id += std::to_string(d);
    const std::int32_t doc = add_node(w, std::move(id), -1, 32768 / documents);
    w.requests.insert(w.requests.end(), std::size_t(512 / documents), doc);
  }
}

// Speculative decoding's verification over a long prompt: one 32,768-token
// prompt shared by B requests with 128 own tokens each, run with --q-len or
// --tree (their draft tokens) and without (the one-token step it should stay
// near: issue 51's 8 x 4 draft tokens within 1.2x).
void add_verify(Workload& w, std::int64_t requests) {
  const std::int32_t prompt = add_node(w, "prompt", -1, 32768);
  for (std::int64_t r = 0; r < requests; ++r) {
    std::string id = "r";  // appended piecewise, as in add_forest
    id += std::to_string(r);
    w.requests.push_back(add_node(w, std::move(id), prompt, 128));
  }
}

// A sliding-window model's long shared context: one document of N tokens
// shared by 32 requests with 128 own tokens each, every query token seeing
// the 4,096 keys up to its own (window_left 4,095). window:131072 is the
// 128k document; window:4096 the same batch with the document cut to its
// last 4,096 tokens, what the long one should cost.
void add_window(Workload& w, std::int64_t document) {
  const std::int32_t doc = add_node(w, "doc", -1, document);
  for (int r = 0; r < 32; ++r) {
    std::string id = "r";  // appended piecewise, as in add_forest
    id += std::to_string(r);
    w.requests.push_back(add_node(w, std::move(id), doc, 128));
  }
  w.window_left = 4095;
}

struct Sweep {
  const char* name;
  const char* default_param;  // nullptr: the scenario takes no parameter
  std::vector<const char*> points;
};

// docs/BENCHMARKS.md's table, in its order.
const std::vector<Sweep>& sweeps() {
  static const std::vector<Sweep> table = {
      {"seq", "512", {"128", "256", "512", "1024", "2048"}},
      {"batch", "64", {"4", "8", "16", "32", "64"}},
      {"depth", "4", {"2", "3", "4", "5", "6"}},
      {"ratio", "0.2", {"0.05", "0.1", "0.2", "0.5", "0.8"}},
      {"shape", "2", {"2", "3", "4", "5", "DT"}},
      {"long", nullptr, {}},
      {"loogle", "8", {"4", "8", "16"}},
      {"fewshot", nullptr, {}},
      {"flat", "8", {"8", "64"}},
      {"sysprompt", "512", {"64", "256", "512"}},
      {"dense", "2", {"2", "4"}},
      {"verify", "8", {"8"}},
      {"window", "131072", {"4096", "131072"}},
  };
  return table;
}

const Sweep* find_sweep(std::string_view name) {
  for (const Sweep& s : sweeps())
    if (name == s.name) return &s;
  return nullptr;
}

}  // namespace

bool is_builtin_workload(const std::string& spec) {
  // A known name with a bad parameter still counts, so that it gets the
  // parameter's error rather than "cannot read file".
  return find_sweep(std::string_view(spec).substr(0, spec.find(':'))) != nullptr;
}

std::vector<std::string> builtin_workload_names() {
  std::vector<std::string> names;
  for (const Sweep& s : sweeps()) {
    if (s.points.empty()) names.emplace_back(s.name);
    for (const char* p : s.points) names.push_back(std::string(s.name) + ":" + p);
  }
  return names;
}

Workload builtin_workload(const std::string& spec) {
  const std::size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const Sweep* sweep = find_sweep(name);
  CODEC_CHECK(sweep != nullptr, "unknown workload '", spec, "' (built-in: ", kKnown, "; or a JSON file path)");
  const bool has_param = colon != std::string::npos;
  CODEC_CHECK(sweep->default_param != nullptr || !has_param, "workload '", name, "' takes no parameter, got '",
              spec.substr(colon + 1), "'");
  std::string param;
  if (has_param) param = spec.substr(colon + 1);
  else if (sweep->default_param) param = sweep->default_param;

  Workload w;
  w.name = sweep->default_param ? name + ":" + param : name;
  if (name == "seq") {  // binary depth 4: the two middle levels are empty
    add_forest(w, 1, 2, {4096, 0, 0, parse_int(name, param, 1, kMaxTokens)});
  } else if (name == "batch") {
    add_forest(w, 1, parse_int(name, param, 1, kMaxRequests), {120000, 2048});
  } else if (name == "depth") {
    const std::int64_t levels = parse_int(name, param, 1, 16);  // 2^15 requests at most
    add_forest(w, 1, 2, std::vector<std::int64_t>(std::size_t(levels), 1024));
  } else if (name == "ratio") {
    // 16 requests of N = 120000 tokens share a root of S tokens and own N − S
    // each, so unique = S + 16 (N − S). S / unique = r gives S = r (16 N − 15 S),
    // i.e. S = 16 r N / (1 + 15 r). Example: r = 0.2 → S = 96000, unique 480000.
    constexpr std::int64_t kRequestTokens = 120000;
    const double r = parse_ratio(param);
    const std::int64_t shared = std::llround(16 * r * double(kRequestTokens) / (1 + 15 * r));
    add_forest(w, 1, 16, {shared, kRequestTokens - shared});
  } else if (name == "shape") {
    // DT is a chain (fan-out 1): one request, nothing shared, pure load balance.
    add_forest(w, 1, param == "DT" ? 1 : parse_int(name, param, 1, 64, "DT"), {1024, 1024, 1024});
  } else if (name == "long") {
    add_forest(w, 1, 32, {50000, 128});
  } else if (name == "loogle") {
    add_loogle(w, parse_int(name, param, 1, 4096));
  } else if (name == "fewshot") {
    add_forest(w, 64, 16, {2048, 128});
  } else if (name == "flat") {  // roots only, no page shared by two requests
    add_forest(w, parse_int(name, param, 1, kMaxRequests), 1, {4096});
  } else if (name == "sysprompt") {
    add_sysprompt(w, parse_int(name, param, 1, kMaxRequests));
  } else if (name == "dense") {
    add_dense(w, parse_int(name, param, 1, 512));
  } else if (name == "verify") {
    add_verify(w, parse_int(name, param, 1, kMaxRequests));
  } else {
    add_window(w, parse_int(name, param, 1, kMaxTokens));
  }
  w.validate();
  return w;
}

}  // namespace codec
