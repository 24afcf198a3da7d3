// Workload files: the JSON form of a Workload (schema in the test and below).
//   {"name": "doc-qa", "seed": 1, "model": "qwen3-4b" | {"num_qo_heads": 32,
//    "num_kv_heads": 8, "head_dim": 128, "sm_scale": 0.088}, "page_size": 16,
//    "dtype": "bf16", "nodes": [{"id": "doc", "parent": null, "tokens": 4096}, ...],
//    "requests": [{"node": "doc"}, ...]}
// Only nodes and requests are required. Nodes may come in any order; unknown
// fields are errors, so that a misspelt optional field is not silently ignored.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "codec/core/error.hpp"
#include "workload/workload.hpp"
#include "core/json_input.hpp"

namespace codec {

namespace {

using nlohmann::json;

// Every check names the file and the JSON path of the offending field.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  template <typename... Args>
  [[noreturn]] void fail(const std::string& where, const Args&... args) const {
    CODEC_FAIL(source_, ": ", where, ": ", args...);
  }

  void only_fields(const json& object, const std::string& where, std::initializer_list<const char*> allowed) const {
    if (!object.is_object()) fail(where, "expected an object, got ", object.type_name(), " ", json_preview(object));
    for (const auto& [key, value] : object.items()) {
      bool known = false;
      for (const char* a : allowed) known = known || key == a;
      if (known) continue;
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      fail(where, "unknown field '", clip(key), "' (expected: ", list, ")");
    }
  }

  const json& required(const json& object, const std::string& where, const char* field) const {
    const auto it = object.find(field);
    if (it == object.end()) fail(where, "missing field '", field, "'");
    return *it;
  }

  std::int64_t integer(const json& value, const std::string& where, std::int64_t lo, std::int64_t hi) const {
    if (!value.is_number_integer()) fail(where, "expected an integer, got ", value.type_name(), " ", json_preview(value));
    // Unsigned values beyond int64 would wrap in get<int64_t>.
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > std::uint64_t(hi))
      fail(where, "value ", json_preview(value), " is outside [", lo, ", ", hi, "]");
    const std::int64_t v = value.get<std::int64_t>();
    if (hi == std::numeric_limits<std::int64_t>::max()) {
      if (v < lo) fail(where, "value ", v, " must be >= ", lo);
    } else if (v < lo || v > hi) {
      fail(where, "value ", v, " is outside [", lo, ", ", hi, "]");
    }
    return v;
  }

  std::string string(const json& value, const std::string& where) const {
    if (!value.is_string()) fail(where, "expected a string, got ", value.type_name(), " ", json_preview(value));
    return value.get<std::string>();
  }

  // Errors thrown by codec calls (model_heads, parse_dtype, validate) gain the source and path.
  template <typename F>
  auto context(const std::string& where, F&& f) const {
    try {
      return f();
    } catch (const Error& e) {
      throw Error(source_ + ": " + where + ": " + e.what());
    }
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

HeadConfig read_model(const Reader& in, const json& model, std::string* name) {
  if (model.is_string()) {
    *name = model.get<std::string>();
    return in.context("model", [&] { return model_heads(*name); });
  }
  in.only_fields(model, "model", {"num_qo_heads", "num_kv_heads", "head_dim", "sm_scale"});
  constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
  HeadConfig heads;
  heads.num_qo_heads = int(in.integer(in.required(model, "model", "num_qo_heads"), "model.num_qo_heads", 1, kMaxInt));
  heads.num_kv_heads = int(in.integer(in.required(model, "model", "num_kv_heads"), "model.num_kv_heads", 1, kMaxInt));
  heads.head_dim = int(in.integer(in.required(model, "model", "head_dim"), "model.head_dim", 1, kMaxInt));
  if (const auto it = model.find("sm_scale"); it != model.end()) {
    if (!it->is_number()) in.fail("model.sm_scale", "expected a number, got ", it->type_name(), " ", json_preview(*it));
    heads.sm_scale = it->get<float>();
  }
  in.context("model", [&] { heads.validate(); });
  *name = "custom";
  return heads;
}

// Nodes in file order → workload nodes with every parent before its children,
// keeping the file's order otherwise.
void read_nodes(const Reader& in, const json& nodes, Workload& w, std::unordered_map<std::string, std::int32_t>& index) {
  if (!nodes.is_array()) in.fail("nodes", "expected an array, got ", nodes.type_name(), " ", json_preview(nodes));
  const std::size_t n = nodes.size();
  std::vector<std::string> ids(n), parents(n);
  std::vector<std::int64_t> tokens(n);
  std::vector<char> is_root(n, 1);
  std::unordered_map<std::string, std::size_t> by_id;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string where = "nodes[" + std::to_string(i) + "]";
    const json& node = nodes[i];
    in.only_fields(node, where, {"id", "parent", "tokens"});
    ids[i] = in.string(in.required(node, where, "id"), where + ".id");
    if (ids[i].empty()) in.fail(where + ".id", "node id must not be empty");
    const auto [it, fresh] = by_id.emplace(ids[i], i);
    if (!fresh) in.fail(where + ".id", "duplicate node id '", clip(ids[i]), "' (first at nodes[", it->second, "])");
    tokens[i] = in.integer(in.required(node, where, "tokens"), where + ".tokens (node '" + clip(ids[i]) + "')", 0,
                           std::numeric_limits<std::int64_t>::max());
    if (const auto p = node.find("parent"); p != node.end() && !p->is_null()) {
      parents[i] = in.string(*p, where + ".parent");
      is_root[i] = 0;
    }
  }
  std::vector<std::size_t> parent(n, n);  // n: a root
  for (std::size_t i = 0; i < n; ++i) {
    if (is_root[i]) continue;
    const auto it = by_id.find(parents[i]);
    if (it == by_id.end())
      in.fail("nodes[" + std::to_string(i) + "].parent", "node '", clip(ids[i]), "' has unknown parent '", clip(parents[i]), "'");
    parent[i] = it->second;
  }
  // Place each node after its ancestors: walk up to a placed node or a root,
  // then place the chain top-down. Meeting the chain itself again is a cycle.
  enum : char { kNew, kOnChain, kPlaced };
  std::vector<char> state(n, kNew);
  std::vector<std::size_t> chain;
  for (std::size_t i = 0; i < n; ++i) {
    chain.clear();
    for (std::size_t j = i; j < n && state[j] != kPlaced; j = parent[j]) {
      if (state[j] == kOnChain) in.fail("nodes", "node '", clip(ids[j]), "' is in a parent cycle");
      state[j] = kOnChain;
      chain.push_back(j);
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const std::size_t j = *it;
      state[j] = kPlaced;
      const std::int32_t p = parent[j] == n ? -1 : index.at(ids[parent[j]]);
      index.emplace(ids[j], std::int32_t(w.nodes.size()));
      w.nodes.push_back({ids[j], p, tokens[j]});
    }
  }
}

}  // namespace

Workload parse_workload_json(const std::string& text, const std::string& source) {
  const Reader in(source);
  const json root = parse_json_input(text, source);
  in.only_fields(root, "top level", {"name", "seed", "model", "page_size", "dtype", "nodes", "requests", "window_left",
                                     "logits_soft_cap", "sinks"});

  Workload w;
  w.name = std::filesystem::path(source).stem().string();
  if (const auto it = root.find("name"); it != root.end()) w.name = in.string(*it, "name");
  if (const auto it = root.find("seed"); it != root.end()) {
    if (!it->is_number_unsigned()) in.fail("seed", "expected an integer >= 0, got ", it->type_name(), " ", json_preview(*it));
    w.seed = it->get<std::uint64_t>();
  }
  if (const auto it = root.find("model"); it != root.end()) w.heads = read_model(in, *it, &w.model);
  if (const auto it = root.find("page_size"); it != root.end())
    w.page_size = int(in.integer(*it, "page_size", 1, std::numeric_limits<int>::max()));
  if (const auto it = root.find("dtype"); it != root.end()) {
    const std::string name = in.string(*it, "dtype");
    w.dtype = in.context("dtype", [&] { return parse_dtype(name); });
  }
  if (const auto it = root.find("window_left"); it != root.end())
    w.window_left = int(in.integer(*it, "window_left", -1, std::numeric_limits<int>::max()));
  if (const auto it = root.find("logits_soft_cap"); it != root.end()) {
    if (!it->is_number()) in.fail("logits_soft_cap", "expected a number, got ", it->type_name(), " ", json_preview(*it));
    w.heads.logits_soft_cap = it->get<float>();
  }
  if (const auto it = root.find("sinks"); it != root.end()) {
    if (!it->is_boolean()) in.fail("sinks", "expected true or false, got ", it->type_name(), " ", json_preview(*it));
    w.sinks = it->get<bool>();
  }

  std::unordered_map<std::string, std::int32_t> index;
  read_nodes(in, in.required(root, "top level", "nodes"), w, index);

  const json& requests = in.required(root, "top level", "requests");
  if (!requests.is_array()) in.fail("requests", "expected an array, got ", requests.type_name(), " ", json_preview(requests));
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const std::string where = "requests[" + std::to_string(r) + "]";
    in.only_fields(requests[r], where, {"node"});
    const std::string node = in.string(in.required(requests[r], where, "node"), where + ".node");
    const auto it = index.find(node);
    if (it == index.end()) in.fail(where + ".node", "request ", r, " names unknown node '", clip(node), "'");
    w.requests.push_back(it->second);
  }
  in.context("workload '" + clip(w.name) + "'", [&] { w.validate(); });
  return w;
}

std::string workload_to_json(const Workload& w) {
  // The model by name when the name gives exactly these heads, else the heads themselves.
  bool named = false;
  for (const char* const* n = model_names(); *n && !named; ++n) {
    if (w.model != *n) continue;
    const HeadConfig h = model_heads(w.model);
    named = h.num_qo_heads == w.heads.num_qo_heads && h.num_kv_heads == w.heads.num_kv_heads &&
            h.head_dim == w.heads.head_dim && h.sm_scale == w.heads.sm_scale;
  }
  json model = w.model;
  if (!named) {
    model = {{"num_qo_heads", w.heads.num_qo_heads}, {"num_kv_heads", w.heads.num_kv_heads},
             {"head_dim", w.heads.head_dim}};
    if (w.heads.sm_scale > 0) model["sm_scale"] = w.heads.sm_scale;
  }
  json nodes = json::array(), requests = json::array();
  for (const WorkloadNode& n : w.nodes)
    nodes.push_back({{"id", n.id}, {"parent", n.parent < 0 ? json(nullptr) : json(w.nodes[std::size_t(n.parent)].id)},
                     {"tokens", n.tokens}});
  for (const std::int32_t r : w.requests) requests.push_back({{"node", w.nodes[std::size_t(r)].id}});
  json root = {{"name", w.name},           {"seed", w.seed},  {"model", model},
               {"page_size", w.page_size}, {"dtype", std::string(to_string(w.dtype))},
               {"nodes", nodes},           {"requests", requests}};
  if (w.window_left >= 0) root["window_left"] = w.window_left;
  if (w.heads.logits_soft_cap > 0) root["logits_soft_cap"] = w.heads.logits_soft_cap;
  if (w.sinks) root["sinks"] = true;
  return root.dump(1) + "\n";
}

Workload load_workload_file(const std::string& path) {
  CODEC_CHECK(!std::filesystem::is_directory(path), "cannot read workload file '", path, "': it is a directory");
  std::ifstream file(path, std::ios::binary);
  CODEC_CHECK(file.good(), "cannot read workload file '", path, "': ", std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  CODEC_CHECK(!file.bad(), "cannot read workload file '", path, "': read error");
  return parse_workload_json(text.str(), path);
}

Workload resolve_workload(const std::string& spec) {
  return is_builtin_workload(spec) ? builtin_workload(spec) : load_workload_file(spec);
}

}  // namespace codec
