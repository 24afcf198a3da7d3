#pragma once
// The schedule of one head slice (KV heads are interchangeable, so the
// planner schedules Hkv/g heads on m/g blocks and repeats it for each of g
// slices): LPT of the slice's task groups on its blocks, in two phases where
// some tasks are wide, as the kernels run. The wide groups go on the slice's
// wide blocks first; then the other groups on its blocks, block j starting
// at the (j / span)-th earliest end of a wide block: the blocks' kernel is a
// dependent launch of the wide one, and its blocks take each SM as its wide
// block leaves, in index order. Until the last wide block ends (W) a block's
// tasks take beside_wide_price (p) of their price: LPT runs on a clock of
// work, u(t) = t / p before W and t + (W / p − W) after, on which every task
// takes its price; u is increasing, so the least-loaded block is the same on
// both clocks. Owns the scratch of the ~80 schedules a search asks for.
// Internal to the planner (src/plan/).
#include <algorithm>
#include <cmath>
#include <vector>

#include "codec/cost/cost_model.hpp"
#include "plan/lpt.hpp"
#include "plan/node_class.hpp"

namespace codec::planning {

class SliceSchedule {
 public:
  // `blocks` of one head slice; where `wide`, wide blocks of `wide_span`
  // blocks each run first, and tasks beside them take beside_wide_price.
  void configure(int blocks, bool wide, int wide_span, double beside_wide_price) {
    blocks_ = blocks, wide_ = wide, wide_span_ = wide_span, beside_wide_price_ = beside_wide_price;
  }
  int wide_blocks() const { return blocks_ / wide_span_; }

  // The makespan of `groups`, handing each item to assign (or assign_wide,
  // on a wide block) as Lpt does; a time ≥ limit as soon as it is no less.
  template <typename Assign, typename AssignWide>
  double operator()(std::vector<TaskGroup>& groups, Assign&& assign, AssignWide&& assign_wide,
                    double limit = INFINITY) {
    if (!wide_) return lpt_(groups, blocks_, assign, limit);
    wide_groups_.clear();
    block_groups_.clear();
    for (const TaskGroup& g : groups) (g.wide ? wide_groups_ : block_groups_).push_back(g);
    const double wide_peak = lpt_(wide_groups_, wide_blocks(), assign_wide, limit);
    if (wide_peak >= limit) return wide_peak;
    ends_.assign(lpt_.loads().begin(), lpt_.loads().end());
    std::sort(ends_.begin(), ends_.end());
    // After W the clocks differ by a constant, 0 exactly when p = 1.
    const double p = beside_wide_price_, ahead = wide_peak / p - wide_peak;
    auto work = [&](double t) { return t < wide_peak ? t / p : t + ahead; };
    start_.resize(blocks_);
    for (int j = 0; j < blocks_; ++j) start_[j] = work(ends_[j / wide_span_]);
    const double peak = lpt_(block_groups_, blocks_, assign, work(limit), &start_);
    return std::max(wide_peak, peak - ahead);  // a peak before W (under W on both clocks) leaves W
  }

  // The makespan of split vector s (one split count per class) over
  // `kv_heads` heads, its tasks priced at `busy`, or a time ≥ limit when it
  // is no less.
  double makespan(const std::vector<NodeClass>& classes, const std::vector<int>& s, const CostModel& cost, int align,
                  int kv_heads, int busy, double limit = INFINITY) {
    task_groups(classes, s, cost, align, kv_heads, busy, groups_);
    return (*this)(groups_, NoAssign{}, NoAssign{}, limit);
  }

 private:
  int blocks_ = 0, wide_span_ = 1;
  bool wide_ = false;
  double beside_wide_price_ = 1;
  Lpt lpt_;
  std::vector<TaskGroup> groups_, wide_groups_, block_groups_;
  std::vector<double> ends_, start_;
};

}  // namespace codec::planning
