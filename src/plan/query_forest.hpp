#pragma once
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

}  // namespace codec::planning
