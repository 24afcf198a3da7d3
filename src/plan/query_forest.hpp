#pragma once
// How a batch of several query tokens per request becomes a plan (queries.hpp):
// the forest's requests become its query tokens, and the tokens that see less
// than their request's path carry masks. Internal to the planner (src/plan/).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "codec/forest/forest.hpp"
#include "codec/plan/plan.hpp"
#include "codec/plan/queries.hpp"

namespace codec::planning {

// The forest whose requests are the query tokens: request r's node lists
// and path serve its tokens qo_indptr[r] .. qo_indptr[r + 1], in order.
Forest query_forest(const Forest& forest, const QueryBatch& queries);

// The arrays of PlanView's masks into `a`, none where every token sees its
// whole path (a one-token causal batch, or QueryMask::none) unless `always`
// (a capacity with masks, whose every plan carries them).
void query_masks(const Forest& forest, const QueryBatch& queries, PlanArrays& a, bool always = false);

// The KV positions [from, to) that every one of a node's rows sees (`reqs`,
// n of a's query tokens): the latest first key, and the earliest end or first
// mask bit. A task of the node inside it has no masked row.
struct SeenByAll {
  std::int32_t from = std::numeric_limits<std::int32_t>::min(), to = std::numeric_limits<std::int32_t>::max();
  bool covers(std::int64_t begin, std::int64_t end) const { return from <= begin && to >= end; }
};
inline SeenByAll seen_by_all(const PlanArrays& a, const std::int32_t* reqs, int n) {
  SeenByAll s;
  for (int k = 0; k < n; ++k) {
    const std::int32_t q = reqs[k];
    s.from = std::max(s.from, a.query_lo[q]);
    s.to = std::min({s.to, a.query_hi[q], a.query_bits_word[q] >= 0 ? a.query_bits_pos[q] : s.to});
  }
  return s;
}

// The forest `rows` (whose requests are the plan's, a's query tokens) less
// the whole pages at each node's head that none of its rows sees (sliding
// windows: a long shared document costs its rows' windows, not its length),
// a.node_kv_begin moved past them; none where no node loses a page (no
// copy: the common case). Every page left keeps its place in the node's page list.
std::optional<Forest> trim_unseen_heads(const Forest& rows, PlanArrays& a);

}  // namespace codec::planning
