#pragma once
// Input checks every engine's run entry shares: the plan is a real one, the
// paged KV it is run on and the query-side buffers match it. Each failure
// names the engine, the argument and both values.
#include <span>

#include "codec/engine/attention_io.hpp"
#include "codec/forest/forest_manager.hpp"
#include "codec/forest/page_table.hpp"
#include "codec/plan/plan.hpp"

namespace codec {

void check_plan_and_kv(const Plan& plan, const PagedKV& kv, const char* engine);

// q and out are [rows, Hq, D] with rows from the plan's batch up to its
// capacity (AttentionIO), q in the plan's dtype, out in it or in fp32 where the
// engine writes fp32 (out_f32); out and lse rows may not overlap.
void check_io(const Plan& plan, const AttentionIO& io, bool out_f32, const char* engine);

// merge_states: o_a, o_b and out of one shape and dtype, the lses [N, H].
void check_merge_states(const QueryRows& o_a, const LseRows& lse_a, const QueryRows& o_b, const LseRows& lse_b,
                        const OutputRows& out, const LseRows& lse_out);

// copy_pages: every copy inside the pool.
void check_page_copies(const PagedKV& kv, std::span<const PageCopy> copies);

}  // namespace codec
