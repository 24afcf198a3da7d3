#pragma once
// A Plan: everything a run needs besides the tensors, as flat arrays in one
// buffer, so one copy moves it to a device and one plan serves every layer and
// several decode steps. PlanView reads the same arrays on the host or, through
// the base address of a device copy, in a kernel.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/core/hd.hpp"
#include "codec/core/heads.hpp"

namespace codec {

// One partial-attention job: KV tokens [kv_begin, kv_end) of a forest node,
// which is chunk `chunk` of that node, for one kv head, against rows
// [row_begin, row_end) of the node's row list. Row v of a node is
// (request node_reqs[node_req_begin[node] + v / G], qo head kv_head·G + v % G).
// The last three fields repeat node-level facts (node_page_begin[node],
// node_req_begin[node], slot_of(node, chunk, kv_head, 0)). With them, and with
// tasks stored in block order (no task-id list), a GPU block reaches its pages
// and query rows two dependent loads after block_indptr instead of four: each
// costs a DRAM round trip when the plan is cold.
struct Task {
  std::int32_t node;
  std::int32_t kv_head;
  std::int32_t chunk;
  std::int32_t kv_begin;
  std::int32_t kv_end;
  std::int32_t row_begin;
  std::int32_t row_end;
  std::int32_t page_begin;  // the node's pages are node_pages[page_begin ..]
  std::int32_t req_begin;   // the node's requests are node_reqs[req_begin ..]
  std::int32_t slot0;       // row v's partial goes to slot slot0 + v
};

// The one layout of a node's partial slots: [chunk][kv head][row] from the
// node's first slot `base`, `rows` rows (requests × G) per chunk and kv head.
struct SlotLayout {
  int base;
  int num_kv_heads;
  int rows;
  CODEC_HD int at(int chunk, int kv_head, int row) const { return base + (chunk * num_kv_heads + kv_head) * rows + row; }
};

// One partial state of a request's rows: row (request, qo head h) finds it in
// slot slot0 + (h / G) · head_stride + h % G (a node's slots are laid out
// [chunk][kv head][row], see slot_of).
struct PartialRef {
  std::int32_t slot0;        // slot_of(node, chunk, 0, the request's first row in the node)
  std::int32_t head_stride;  // the node's rows
};

// A KV token listed by page and slot: a tail token (PlanView::tail_tokens).
struct TokenRef {
  std::int32_t page;
  std::int32_t slot;
};

struct PlanView {
  int num_tasks = 0;
  int num_blocks = 0;    // m: persistent workers; block b runs tasks[block_indptr[b] .. block_indptr[b+1]) in order
  int num_nodes = 0;
  // Requests whose rows the merge writes: the plan's batch B, or its capacity
  // for a plan packed at one, whose requests past B have no partials (their
  // rows come out as the empty state). A run narrows it to its out.batch.
  int num_requests = 0;
  int num_slots = 0;     // partial states in the workspace
  int group = 0;         // G = Hq / Hkv
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  // Wide blocks (the CUDA engine's wide kernel: one a SM, tasks of up to
  // kCudaMaxWideRows rows; 0 when the plan has none) run before the blocks
  // and their tasks come after the blocks' in `tasks`.
  int num_wide_blocks = 0;
  // Block b runs task b alone (none for b >= num_tasks), and there are no wide
  // blocks: a block knows its range without loading block_indptr, a DRAM round
  // trip on a cold plan that small trees (a task a block) pay before anything
  // else. Never set at a capacity, where a captured graph may run another plan.
  bool single_task_blocks = false;
  // tail_indptr is there (node_reqs + 1 entries): some wide task may take in
  // tails (PlannerOptions::wide_tail_tokens). Always set at a capacity that
  // holds tail tokens, whose plans a captured graph may swap.
  bool tails = false;
  const Task* tasks = nullptr;                 // [num_tasks], block by block, then wide block by wide block
  const std::int32_t* block_indptr = nullptr;  // [num_blocks + 1]
  // [num_wide_blocks + 1] (none when 0): wide block w runs tasks[wide_indptr[w] .. wide_indptr[w+1])
  const std::int32_t* wide_indptr = nullptr;
  const std::int32_t* node_page_begin = nullptr;  // [num_nodes + 1]; token t of a node is in page
  const std::int32_t* node_pages = nullptr;       //   node_pages[node_page_begin[node] + t / page_size]
  const std::int32_t* node_req_begin = nullptr;   // [num_nodes + 1] into node_reqs
  const std::int32_t* node_reqs = nullptr;
  const std::int32_t* node_splits = nullptr;      // [num_nodes] chunks b_k of each node (0 if empty)
  const std::int32_t* node_slot_base = nullptr;   // [num_nodes] first partial slot of each node
  // Reduction schedule: every row of request b merges the partials
  // partials[partial_indptr[b] .. partial_indptr[b+1]): each chunk of each node
  // on b's path, root first. A flat list rather than the path, so that a merge
  // finds its slots two dependent loads after the request instead of walking
  // path → node → chunks → slot, each load a round trip on a cold plan.
  const std::int32_t* partial_indptr = nullptr;  // [num_requests + 1]
  const PartialRef* partials = nullptr;
  // Tails: entry e of node_reqs (request node_reqs[e] of its node) has the
  // private tail tail_tokens[tail_indptr[e] .. tail_indptr[e + 1]) (most are
  // empty). The node's tasks attend each row to its request's tail after
  // their own tokens (task_tails): the tail's leaf node has no tasks and no
  // partials.
  const std::int32_t* tail_indptr = nullptr;  // [node_reqs + 1] where `tails`, else none
  const TokenRef* tail_tokens = nullptr;

  // Masks (QueryBatch): where some query token sees less than its request's
  // whole path. A plan's requests are then query tokens (its rows of q and
  // out). Node `node`'s token t is at position node_kv_begin[node] + t of
  // every path through it; request q sees the positions [query_lo[q],
  // query_hi[q]) and, from query_bits_pos[q] on, only those whose bit is set
  // in mask_words[query_bits_word[q] ..] (bit k, the low bit first, for
  // position query_bits_pos[q] + k); query_bits_word[q] < 0: no bits.
  bool masks = false;
  const std::int32_t* node_kv_begin = nullptr;    // [num_nodes] where `masks`
  const std::int32_t* query_lo = nullptr;         // [num_requests] where `masks`
  const std::int32_t* query_hi = nullptr;
  const std::int32_t* query_bits_pos = nullptr;
  const std::int32_t* query_bits_word = nullptr;
  const std::uint32_t* mask_words = nullptr;

  // The tokens [begin, end) of `node` (its own positions, clipped to
  // [lo, hi)) that request q sees before its bits: a row's work in a task.
  struct Visible {
    int begin = 0, end = 0;
  };
  CODEC_HD Visible visible(int node, int q, int lo, int hi) const {
    if (!masks) return {lo, hi};
    const int base = node_kv_begin[node];
    const int b = query_lo[q] - base > lo ? query_lo[q] - base : lo;
    const int e = query_hi[q] - base < hi ? query_hi[q] - base : hi;
    return {b, e > b ? e : b};
  }
  // Whether some row of task t sees less than all of the task's keys.
  CODEC_HD bool masked(const Task& t) const {
    if (!masks) return false;
    for (int r = t.row_begin / group; r <= (t.row_end - 1) / group; ++r) {  // the requests of its rows
      const int q = node_reqs[t.req_begin + r];
      const Visible seen = visible(t.node, q, t.kv_begin, t.kv_end);
      if (seen.begin != t.kv_begin || seen.end != t.kv_end ||
          (query_bits_word[q] >= 0 && query_bits_pos[q] < node_kv_begin[t.node] + t.kv_end))
        return true;
    }
    return false;
  }
  // Whether request q sees token t of `node`, inside its visible range.
  CODEC_HD bool sees(int node, int q, int t) const {
    if (!masks || query_bits_word[q] < 0) return true;
    const int k = node_kv_begin[node] + t - query_bits_pos[q];
    return k < 0 || (mask_words[query_bits_word[q] + k / 32] >> (k % 32) & 1u);
  }

  // The tail tokens task t takes in, tail_tokens[begin .. end): the tails of
  // the requests with a row in it, concatenated, cut into the node's chunks'
  // count of equal parts, chunk c taking part c, so that every chunk of the
  // node carries an equal share. A row sees the part of its own request's
  // tail that falls in [begin, end); summed over the chunks, all of it once.
  struct TailRange {
    int begin = 0, end = 0;
  };
  CODEC_HD TailRange task_tails(const Task& t) const {
    if (!tails) return {};
    const int first = tail_indptr[t.req_begin + t.row_begin / group];
    const int last = tail_indptr[t.req_begin + (t.row_end - 1) / group + 1];
    const int chunks = node_splits[t.node], per = (last - first + chunks - 1) / chunks;
    const int begin = first + t.chunk * per < last ? first + t.chunk * per : last;
    return {begin, begin + per < last ? begin + per : last};
  }

  CODEC_HD int num_partials(int req) const { return partial_indptr[req + 1] - partial_indptr[req]; }
  // Slot of partial j (an index into partials) for qo head `head`: SlotLayout
  // at chunk 0 from slot0, with head_stride as its rows.
  CODEC_HD int partial_slot(int j, int head) const {
    return partials[j].slot0 + (head / group) * partials[j].head_stride + head % group;
  }
  CODEC_HD int node_rows(int node) const { return (node_req_begin[node + 1] - node_req_begin[node]) * group; }
  CODEC_HD int slot_of(int node, int chunk, int kv_head, int row) const {
    return SlotLayout{node_slot_base[node], num_kv_heads, node_rows(node)}.at(chunk, kv_head, row);
  }
};

struct PlanStats {
  int num_nodes = 0;
  int num_requests = 0;     // the plan's requests: its query tokens (q's rows), one per request of a one-token batch
  int batch_requests = 0;   // the batch's requests (QueryBatch: each of one or more query tokens)
  int num_units = 0;     // (node, kv head, row tile) before KV splitting
  int num_tasks = 0;     // after splitting
  int num_wide_tasks = 0;  // of them, those of wide blocks
  int num_blocks = 0;
  int max_splits = 0;    // largest b_k of any node
  int num_slots = 0;
  int merged_requests = 0;  // requests whose rows merge more than one partial
  int num_tails = 0;        // requests whose tail a wide task takes in (PlannerOptions::wide_tail_tokens)
  double makespan_us = 0;     // slowest block's predicted time
  double merge_us = 0;        // the merge's predicted time after it (0: the cost model prices none)
  double lower_bound_us = 0;  // no plan under this cost model, every block busy, can be faster (a plan of fewer
                              // tasks than blocks under a model that prices contention, or one whose tasks
                              // beside wide ones are priced below the table, may come in under it)
  double cost_l_us = 0;       // the paper's mean-load bound, which sets the split caps
  double plan_ms = 0;         // host time of make_plan
  std::int64_t kv_tokens_read = 0;    // Σ task KV tokens (each kv head counted)
  std::int64_t unique_kv_tokens = 0;  // forest tokens × kv heads
  // makespan over the bound: below 1 only for a plan of one wave under a model that prices contention, or
  // with tasks beside wide ones priced below the table (PlannerOptions::beside_wide_price)
  double quality() const { return lower_bound_us > 0 ? makespan_us / lower_bound_us : 1.0; }
  // KV tokens read over the unique ones: above 1 where row tiles of a node each read it
  double read_factor() const { return unique_kv_tokens > 0 ? double(kv_tokens_read) / double(unique_kv_tokens) : 1.0; }
};

// Host arrays a planner fills; Plan packs them into one buffer.
struct PlanArrays {
  // The arrays of a batch of no requests on `blocks` blocks: every block
  // without tasks (and an empty tail index where `tails`: a capacity's with
  // tail tokens).
  static PlanArrays none(int blocks, int wide_blocks = 0, bool tails = false);
  void clear();  // every array empty, its capacity kept
  std::vector<Task> tasks;
  std::vector<std::int32_t> block_indptr;
  std::vector<std::int32_t> wide_indptr;  // empty: no wide blocks
  std::vector<std::int32_t> node_page_begin, node_pages, node_req_begin, node_reqs, node_splits, node_slot_base;
  std::vector<std::int32_t> partial_indptr;
  std::vector<PartialRef> partials;
  std::vector<std::int32_t> tail_indptr;  // empty: no tails
  std::vector<TokenRef> tail_tokens;
  // empty: no masks (PlanView::masks)
  std::vector<std::int32_t> node_kv_begin, query_lo, query_hi, query_bits_pos, query_bits_word;
  std::vector<std::uint32_t> mask_words;
};

// Sizes a plan's arrays may take. A plan packed at a capacity keeps every
// array at an offset that depends on the capacity alone, and its workspace
// holds `slots` partials whatever it uses: every plan packed at one capacity
// fits one workspace layout, so a CUDA graph captured with one of them replays
// any other uploaded in its place (re-planning without re-capture).
// What a batch's query tokens may bring at a capacity (QueryBatch): up to
// `tokens` query tokens in all (qo_indptr's last entry) and a custom or draft
// mask of up to `mask_bytes` bytes (QueryBatch::mask_bits). tokens 0: one
// token a request, and no masks.
struct QueryCapacity {
  int tokens = 0;
  std::int64_t mask_bytes = 0;
};

struct PlanCapacity {
  int requests = 0;  // rows a run may cover (query tokens); a batch may be smaller
  int blocks = 0;    // m: every plan at this capacity has exactly this many blocks
  int wide_blocks = 0;  // and exactly this many wide blocks (0: none)
  int nodes = 0;
  std::int64_t node_pages = 0;
  std::int64_t node_reqs = 0;
  std::int64_t tasks = 0;
  std::int64_t partials = 0;
  std::int64_t slots = 0;
  std::int64_t tail_tokens = 0;  // > 0: every plan at it carries tail_indptr
  // Every plan at it carries masks (PlanView::masks), a query token that sees
  // all of its keys too, so that a graph captured with one runs the kernels'
  // masked instances for any plan uploaded in its place; never with tails.
  bool masks = false;
  std::int64_t mask_words = 0;

  // The capacity for every batch of at most max_requests requests whose page
  // tables hold at most max_page_entries entries, planned with max_tile_rows
  // rows per task on `blocks` blocks (and `wide_blocks` wide blocks, whose
  // tasks hold at least max_tile_rows rows), with `slots` partial slots. The
  // other sizes are bounds that hold for any such batch:
  //   nodes ≤ 2·max_requests − 1 (a compressed trie of that many paths) and
  //     ≤ max_page_entries (every node of a derived forest has a page);
  //   node_pages ≤ max_page_entries (a shared page is listed once);
  //   node_reqs = Σ over requests of the nodes on its path ≤ max_page_entries;
  //   partials = slots / Hq (every partial is one slot per qo head);
  //   tasks ≤ slots / min(G, max_tile_rows / 2) (a row tile holds at least G
  //     rows, or more than half a tile when a node has several);
  //   tail_tokens = max_requests · max_tail_tokens (a request has one tail).
  // With query tokens (queries.tokens = T >= max_requests = R, P page
  // entries) a run covers T rows and the plan's requests are its tokens:
  //   node_reqs ≤ P + max over k ≤ R of (T − k) · min(P, k) (a batch of k
  //     requests: each path has at most min(its pages, k) nodes, each
  //     listed once per token, a request's first token within P);
  //   mask_words ≤ mask_bytes / 4 + T (a token's row of bits from a word
  //     boundary); no tail tokens.
  static PlanCapacity for_batches(int max_requests, std::int64_t max_page_entries, const HeadConfig& heads,
                                  int max_tile_rows, int blocks, std::int64_t slots, int wide_blocks = 0,
                                  int max_tail_tokens = 0, const QueryCapacity& queries = {});
  void validate() const;
};

// What every run checks, derived from the arrays once when the Plan is built,
// so that a run's host-side validation costs O(1) rather than a pass over the
// task and page lists per layer.
struct PlanExtent {
  int max_task_rows = 0;      // most query rows of any task of a block
  int max_wide_rows = 0;      // most query rows of any task of a wide block
  int min_partials = 0;       // fewest and most partials a request merges (0 and 0 without requests)
  int max_partials = 0;
  std::int32_t min_page = 0;  // range of node_pages (max_page < min_page: no pages)
  std::int32_t max_page = -1;
  // Some request has other than one partial: its rows need the merge (with
  // none, the merge writes the empty state). Always true for a plan packed at
  // a capacity: a run captured in a graph with it must merge for any plan
  // uploaded in its place.
  bool needs_merge = false;
  // Tasks some of whose rows see only part of the task's keys (PlanView::masks).
  int masked_tasks = 0;
  // Some query token sees no key before some position (a sliding window, QueryBatch::window_left).
  bool windowed = false;
};

// Workspace of a run: fp32 partial outputs [num_slots, head_dim], then fp32
// partial lse [num_slots] (natural log). Its size comes from the plan alone.
struct WorkspaceLayout {
  std::size_t o_offset = 0;
  std::size_t lse_offset = 0;
  std::size_t bytes = 0;
};

// A plan records what it was made for (heads, dtype, page size, batch) and
// every run checks the KV cache and buffers it gets against that.
class Plan {
 public:
  Plan() = default;
  // Packs the arrays compactly, or at `capacity` when given (throws naming the
  // first size that exceeds it).
  Plan(const HeadConfig& heads, DType dtype, int page_size, const PlanArrays& arrays, const PlanStats& stats,
       const PlanCapacity* capacity = nullptr);

  const HeadConfig& heads() const { return heads_; }
  DType dtype() const { return dtype_; }
  int page_size() const { return counts_.page_size; }
  int num_requests() const { return stats_.num_requests; }  // the batch B it was planned for
  const PlanStats& stats() const { return stats_; }
  PlanStats& stats() { return stats_; }
  const PlanExtent& extent() const { return extent_; }
  bool has_capacity() const { return has_capacity_; }
  bool masks() const { return counts_.masks; }  // PlanView::masks, without building a view

  // The packed arrays, to copy to a device as they are.
  std::span<const std::byte> bytes() const { return buffer_; }
  PlanView view() const { return view(buffer_.data()); }
  // The same view with its pointers into a copy of bytes() that starts at `base`.
  PlanView view(const void* base) const;
  WorkspaceLayout workspace() const { return workspace_for(counts_.num_slots, heads_.head_dim); }

  // The plan of no requests packed at `capacity`: every row a run covers
  // comes out as the empty state (o = 0, lse = −inf).
  static Plan empty(const HeadConfig& heads, DType dtype, int page_size, const PlanCapacity& capacity);
  // Bytes of the packed arrays of a plan at `capacity` (bytes().size() of any such plan).
  static std::size_t packed_bytes(const PlanCapacity& capacity);
  // Packs `arrays` at `capacity` into `out` (packed_bytes(capacity) bytes)
  // where the constructor would, writing only what a run reads: the
  // reduction schedule for every request of the capacity and the block
  // index for every block (the ranges through which everything else is
  // reached), and of the other arrays the entries in use. The rest of `out`
  // keeps what it held, so re-packing one buffer (a stream's pinned staging)
  // costs the plan's size rather than the capacity's. Throws, writing
  // nothing, where the arrays do not fit.
  static void pack_into(const PlanArrays& arrays, const PlanCapacity& capacity, std::span<std::byte> out);
  // The partials' workspace for `slots` slots of head_dim floats.
  static WorkspaceLayout workspace_for(std::int64_t slots, int head_dim);

 private:
  // The arrays of PlanArrays (and pointers of PlanView), packed in the order
  // plan.cpp's table lists them; offsets_ holds each one's byte offset.
  static constexpr int kNumArrays = 19;
  HeadConfig heads_;
  DType dtype_ = DType::bf16;
  bool has_capacity_ = false;
  PlanStats stats_;
  PlanExtent extent_;
  std::vector<std::byte> buffer_;
  PlanView counts_;                               // sizes filled in, pointers null
  std::array<std::size_t, kNumArrays> offsets_{};
};

}  // namespace codec
