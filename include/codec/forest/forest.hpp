#pragma once
// The prefix forest of a batch: the KV tokens of a request are the concatenation
// of the nodes on its root→leaf path, and a node is a maximal run of pages used
// by the same set of requests. Every node's KV is read once per batch.
#include <cstdint>
#include <vector>

#include "codec/forest/page_table.hpp"

namespace codec {

struct ForestNode {
  std::int32_t parent = -1;      // index of the parent node, −1 for a root; parent < own index
  std::int32_t num_tokens = 0;   // KV tokens of this node (may be 0)
  std::int64_t page_begin = 0;   // the node's pages are Forest::pages[page_begin, page_begin + num_pages)
  std::int32_t num_pages = 0;    // ceil(num_tokens / page_size); every page full but the last
  std::int64_t req_begin = 0;    // requests attending to it: Forest::reqs[req_begin, req_begin + num_reqs)
  std::int32_t num_reqs = 0;     // n_q: the sharing degree
};

struct Forest {
  int page_size = 0;
  std::vector<ForestNode> nodes;          // topological order: parents first
  std::vector<std::int32_t> pages;        // node page lists, concatenated
  std::vector<std::int32_t> reqs;         // node request lists (ascending ids), concatenated
  std::vector<std::int32_t> request_node; // [B] the deepest node of each request's path

  int num_requests() const { return int(request_node.size()); }
  int num_nodes() const { return int(nodes.size()); }
  std::int64_t unique_tokens() const;         // Σ node tokens: KV read once per batch
  std::int64_t flat_tokens() const;           // Σ request tokens: KV read once per request
  std::int64_t request_tokens(int r) const;   // tokens on request r's path
  // Checks every structural invariant; throws codec::Error naming the first broken one.
  void validate() const;
};

// Derives the forest from standard page tables in O(total pages): a radix tree
// over page ids (hash lookups only where paths branch), compressed so that node
// boundaries fall exactly where the set of requests using a page changes.
// Requests may come in any order; nodes are numbered by depth, ties in order of
// creation, so numbering is deterministic for a given request order.
// Two requests share a page only when it sits at the same path position with
// the same token count; the rare page shared at different positions is read
// once per position (correct, just not deduplicated).
Forest derive_forest(const PageTable& table);

// The flattened problem: every request alone, its path copied into private
// nodes (same pages, sharing degree 1). Planning it gives the flat baseline.
Forest flatten(const Forest& forest);

}  // namespace codec
