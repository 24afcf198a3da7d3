#pragma once
#include <optional>
// How a batch of several query tokens per request becomes a plan (queries.hpp):
// the forest's requests become its query tokens, and the tokens that see less
// than their request's path carry masks. Internal to the planner (src/plan/).
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

// The forest `rows` (whose requests are the plan's, a's query tokens) less
// the whole pages at each node's head that none of its rows sees (sliding
// windows: a long shared document costs its rows' windows, not its length),
// a.node_kv_begin moved past them; none where no node loses a page (no
// copy: the common case). Every page left keeps its place in the node's page list.
std::optional<Forest> trim_unseen_heads(const Forest& rows, PlanArrays& a);

}  // namespace codec::planning
