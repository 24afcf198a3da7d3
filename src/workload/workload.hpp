#pragma once
// Workloads: a tree (or forest) of nodes with token counts, and requests that
// each name the node ending their path. Built-in scenarios of docs/BENCHMARKS.md and
// JSON files of the same shape; materialised into a real paged KV cache through
// the forest manager, so shared tokens are physically shared pages.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/core/heads.hpp"
#include "codec/forest/forest_manager.hpp"
#include "codec/forest/page_table.hpp"
#include "codec/plan/queries.hpp"

namespace codec {

struct WorkloadNode {
  std::string id;
  std::int32_t parent = -1;  // index into Workload::nodes, −1 for a root
  std::int64_t tokens = 0;   // ≥ 0
};

struct Workload {
  std::string name;
  std::uint64_t seed = 1;
  std::string model = "qwen3-4b";
  HeadConfig heads = model_heads("qwen3-4b");
  int page_size = 16;
  DType dtype = DType::bf16;  // the KV cache's, and q's but under an fp8 cache (whose q is bf16)
  std::vector<WorkloadNode> nodes;   // parents before children
  std::vector<std::int32_t> requests;  // node index ending each request's path
  // Query tokens of every request (with_queries): 1 decodes; q_len > 1 are
  // the last q_len tokens of its KV under a causal mask, or, with a draft
  // tree (tree_depth levels of tree_width tokens, q_len = their product),
  // under the tree's mask.
  int q_len = 1;
  int tree_width = 0, tree_depth = 0;
  // A custom mask over each request's [q_len, kv_len] keys instead of causal
  // (QueryMask::custom: packed bits, each request from a byte boundary), or
  // empty (with_custom_mask).
  std::vector<std::uint8_t> custom_mask;
  // The variants of today's models: a sliding window over every query token
  // (QueryBatch::window_left; −1: none), a logit soft-cap in `heads`, and
  // attention sinks, one logit a qo head drawn from the seed (materialize).
  int window_left = -1;
  bool sinks = false;

  // Throws codec::Error naming the field and value (unknown parent, cycle,
  // negative tokens, no requests, empty request, heads, page size, dtype,
  // a custom mask with a tree or of the wrong size).
  void validate() const;
  std::int64_t request_tokens(int r) const;
  std::int64_t unique_tokens() const;
  // Multiplies every node's token count by factor (a non-empty node keeps ≥ 1 token).
  Workload scaled(double factor) const;
  // The workload with q_len query tokens a request (codec bench --q-len), or
  // a draft tree of tree_depth levels of tree_width tokens (--tree W,D): each
  // request's last node grows by the tokens past its first query token, or,
  // where that node is not the request's alone, a private child of them is
  // added; the first query token is the last token the request had.
  Workload with_queries(int q_len, int tree_width = 0, int tree_depth = 0) const;
  // The workload's query tokens under `bits` (codec bench --custom-mask):
  // FlashInfer's packed_custom_mask of its requests' [q_len, kv_len]
  // matrices; throws naming the bytes expected where their count differs.
  Workload with_custom_mask(std::vector<std::uint8_t> bits) const;
  // Host memory, in bytes, that building its page tables takes (token ids,
  // page lists, the forest manager's pages; `workload_page_tables`), and what
  // `materialize` takes besides (the K and V pools, queries, the fp64
  // reference's output): upper bounds, computed without allocating.
  struct Footprint {
    double tables_bytes = 0;
    double batch_bytes = 0;
  };
  Footprint footprint() const;
};

// "seq:512", "batch:64", "depth:4", "ratio:0.2", "shape:3", "shape:DT", "long",
// "loogle:8", "fewshot", "flat:64"; a bare sweep name takes its default point.
Workload builtin_workload(const std::string& spec);
std::vector<std::string> builtin_workload_names();  // every sweep point, in table order
bool is_builtin_workload(const std::string& spec);

Workload parse_workload_json(const std::string& text, const std::string& source);
// The JSON a workload file holds; parse_workload_json of it gives the workload back.
std::string workload_to_json(const Workload& workload);
Workload load_workload_file(const std::string& path);
// A built-in name or a path to a JSON file.
Workload resolve_workload(const std::string& spec);

// A workload's batch in memory: K/V page pools (NHD) and queries filled with
// seeded random values, page tables from the forest manager.
// A workload's query tokens (Workload::q_len) as a plan takes them: request
// r's rows qo_indptr[r] .. qo_indptr[r + 1] (none: one each), causal, or the
// masks of its draft trees (a token of level l > 0 the child of one of level
// l − 1 drawn from the seed; each sees its ancestors and itself).
struct WorkloadQueries {
  std::vector<std::int32_t> qo_indptr;
  QueryMask mask = QueryMask::causal;
  std::vector<std::uint8_t> mask_bits;
  int window_left = -1;
  QueryBatch view() const { return {qo_indptr, mask, mask_bits, window_left}; }
};
WorkloadQueries workload_queries(const Workload& workload);

struct Batch {
  HeadConfig heads;
  WorkloadQueries queries;  // q has a row per query token
  int num_queries() const { return queries.qo_indptr.empty() ? num_requests() : queries.qo_indptr.back(); }
  DType dtype = DType::bf16;    // the KV cache's
  DType q_dtype = DType::bf16;  // q's: the KV's, or bf16 under an fp8 cache
  int page_size = 0;
  std::int64_t num_pages = 0;
  std::vector<std::byte> k, v;   // [num_pages, page_size, Hkv, D] in dtype
  std::vector<std::byte> q;      // [num_queries, Hq, D] in q_dtype
  // An fp8 cache's scales, one a kv head, drawn from the seed (empty: none):
  // K's values are the stored ones times k_scale (PagedKV::k_scale).
  std::vector<float> k_scale, v_scale;
  std::vector<float> sinks;  // [Hq] where Workload::sinks (AttentionIO::sinks), else empty
  ForestManager::Tables tables;  // one page list per request, in request order
  PageTable page_table() const { return tables.view(num_pages, page_size); }
  PagedKV kv() const;
  int num_requests() const { return int(tables.ids.size()); }
};
Batch materialize(const Workload& workload);

// The page tables materialize() makes (the same pages, densely numbered),
// without any KV data.
struct WorkloadTables {
  ForestManager::Tables tables;
  std::int64_t num_pages = 0;
  int page_size = 0;
  PageTable view() const { return tables.view(num_pages, page_size); }
};
WorkloadTables workload_page_tables(const Workload& workload);

// The synthetic data materialize() writes, exposed so that tests and tools can
// check a batch without trusting its page tables. Node i's tokens get distinct
// ids; a request's ids are those of its path's nodes, concatenated.
std::vector<std::int32_t> request_token_ids(const Workload& workload, int r);
// K (is_v false) or V of one token, in [−1, 1), before rounding to the dtype: a
// function of the seed and the token id only, so equal prefixes hold equal KV.
float synthetic_kv(std::uint64_t seed, std::int32_t token, int kv_head, int dim, bool is_v);

}  // namespace codec
