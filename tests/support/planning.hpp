#pragma once
// Test support: expands a plan's reduction schedule and checks that every KV
// token of every output row is covered by exactly one task (a tail's by one
// of its parent's chunks), and that each row's schedule lists exactly the slots
// its tasks wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "codec/forest/forest.hpp"
#include "codec/plan/plan.hpp"

namespace codec::test {

// A cost model whose wide tasks (PlannerOptions::wide_tile_rows) cost
// `factor` times the default (CostModel::wide_cost_us): below 1 the planner
// makes every node of many rows wide, above 1 none.
class WidePriced final : public CostModel {
 public:
  WidePriced(const CostModel& base, double factor) : base_(base), factor_(factor) {}
  double cost_us(int rows, long kv_len) const override { return base_.cost_us(rows, kv_len); }
  bool prices_wide() const override { return true; }
  double wide_cost_us(int rows, long kv_len, int span) const override {
    return factor_ * 2 * base_.cost_us((rows + 1) / 2, kv_len) / span;
  }
  std::string describe() const override { return "wide x" + std::to_string(factor_); }

 private:
  const CostModel& base_;
  double factor_;
};

// Slots row (request, qo head) merges, per the plan's schedule.
inline std::vector<int> row_slots(const PlanView& p, int req, int head) {
  std::vector<int> slots;
  for (int j = p.partial_indptr[req]; j < p.partial_indptr[req + 1]; ++j) slots.push_back(p.partial_slot(j, head));
  return slots;
}

inline void expect_plan_covers_forest(const Plan& plan, const Forest& forest) {
  const PlanView p = plan.view();
  const int G = p.group, Hq = p.num_qo_heads;
  // The blocks' task ranges, then the wide blocks', tile [0, num_tasks) in
  // order: every task runs once.
  ASSERT_EQ(p.block_indptr[0], 0);
  for (int b = 0; b < p.num_blocks; ++b) ASSERT_LE(p.block_indptr[b], p.block_indptr[b + 1]) << "block " << b;
  if (p.single_task_blocks) {
    for (int b = 0; b <= p.num_blocks; ++b) ASSERT_EQ(p.block_indptr[b], std::min(b, p.num_tasks)) << "block " << b;
  }
  if (p.num_wide_blocks == 0) {
    ASSERT_EQ(p.block_indptr[p.num_blocks], p.num_tasks);
  } else {
    ASSERT_EQ(p.wide_indptr[0], p.block_indptr[p.num_blocks]);
    for (int w = 0; w < p.num_wide_blocks; ++w)
      ASSERT_LE(p.wide_indptr[w], p.wide_indptr[w + 1]) << "wide block " << w;
    ASSERT_EQ(p.wide_indptr[p.num_wide_blocks], p.num_tasks);
  }
  if (p.tails) {
    for (int e = 0; e < p.node_req_begin[p.num_nodes]; ++e) ASSERT_LE(p.tail_indptr[e], p.tail_indptr[e + 1]);
  }
  // Expand tasks to (request, head) → node → covered tokens, and slot → writers.
  std::map<std::tuple<int, int, int>, std::vector<int>> cover;  // (req, head, node) → per-token count
  std::vector<int> slot_writers(p.num_slots, 0);
  std::map<int, std::pair<int, int>> slot_row;  // slot → (req, head)
  std::map<std::pair<int, int>, std::vector<int>> row_written;  // (req, head) → the slots its tasks wrote
  for (int t = 0; t < p.num_tasks; ++t) {
    const Task& task = p.tasks[t];
    const ForestNode& n = forest.nodes[task.node];
    ASSERT_TRUE(0 <= task.kv_begin && task.kv_begin < task.kv_end && task.kv_end <= n.num_tokens) << "task " << t;
    ASSERT_TRUE(0 <= task.row_begin && task.row_begin < task.row_end && task.row_end <= n.num_reqs * G);
    ASSERT_LT(task.chunk, p.node_splits[task.node]);
    ASSERT_EQ(task.page_begin, p.node_page_begin[task.node]) << "task " << t;
    ASSERT_EQ(task.req_begin, p.node_req_begin[task.node]) << "task " << t;
    ASSERT_EQ(task.slot0, p.slot_of(task.node, task.chunk, task.kv_head, 0)) << "task " << t;
    for (int v = task.row_begin; v < task.row_end; ++v) {
      const int req = forest.reqs[n.req_begin + v / G], head = task.kv_head * G + v % G;
      auto& tokens = cover[{req, head, task.node}];
      tokens.resize(n.num_tokens, 0);
      for (int k = task.kv_begin; k < task.kv_end; ++k) ++tokens[k];
      // the row's share of its tail (PlanView::task_tails): of its request's last node, token by token
      const int e = task.req_begin + v / G;
      const PlanView::TailRange tails = p.task_tails(task);
      if (p.tails && p.tail_indptr[e + 1] > p.tail_indptr[e]) {
        const int x = forest.request_node[req];
        const ForestNode& tail = forest.nodes[x];
        ASSERT_EQ(tail.parent, task.node) << "request " << req << "'s tail is not its node's child";
        ASSERT_EQ(tail.num_reqs, 1) << "node " << x << " is shared, not a tail";
        ASSERT_EQ(p.tail_indptr[e + 1] - p.tail_indptr[e], tail.num_tokens) << "request " << req;
        ASSERT_EQ(p.node_splits[x], 0) << "tail node " << x << " has tasks of its own";
        auto& tail_tokens = cover[{req, head, x}];
        tail_tokens.resize(tail.num_tokens, 0);
        for (int i = std::max(p.tail_indptr[e], tails.begin); i < std::min(p.tail_indptr[e + 1], tails.end); ++i) {
          const int k = i - p.tail_indptr[e];
          const TokenRef ref = p.tail_tokens[i];
          ASSERT_EQ(ref.page, forest.pages[tail.page_begin + k / forest.page_size]) << "node " << x << " token " << k;
          ASSERT_EQ(ref.slot, k % forest.page_size) << "node " << x << " token " << k;
          ++tail_tokens[k];
        }
      }
      const int slot = p.slot_of(task.node, task.chunk, task.kv_head, v);
      ASSERT_TRUE(slot >= 0 && slot < p.num_slots);
      ++slot_writers[slot];
      slot_row[slot] = {req, head};
      row_written[{req, head}].push_back(slot);
    }
  }
  for (int r = 0; r < forest.num_requests(); ++r) {
    for (int h = 0; h < Hq; ++h) {
      for (int i = forest.request_node[r]; i >= 0; i = forest.nodes[i].parent) {
        if (forest.nodes[i].num_tokens == 0) continue;
        const auto it = cover.find({r, h, i});
        ASSERT_NE(it, cover.end()) << "request " << r << " head " << h << " node " << i << " not covered";
        for (int k = 0; k < forest.nodes[i].num_tokens; ++k)
          ASSERT_EQ(it->second[k], 1) << "request " << r << " head " << h << " node " << i << " token " << k;
      }
      // the row's reduction schedule lists exactly the slots its tasks wrote, each once
      std::vector<int> slots = row_slots(p, r, h), written = row_written[{r, h}];
      for (int s : slots) {
        ASSERT_EQ(slot_writers[s], 1) << "slot " << s;
        ASSERT_EQ(slot_row[s], std::make_pair(r, h)) << "slot " << s << " belongs to another row";
      }
      std::sort(slots.begin(), slots.end());
      std::sort(written.begin(), written.end());
      ASSERT_EQ(slots, written) << "request " << r << " head " << h;
    }
  }
  for (const auto& [key, tokens] : cover) {
    const auto [r, h, node] = key;
    bool on_path = false;
    for (int i = forest.request_node[r]; i >= 0 && !on_path; i = forest.nodes[i].parent) on_path = i == node;
    ASSERT_TRUE(on_path) << "request " << r << " reads node " << node << " off its path";
  }
}

}  // namespace codec::test
