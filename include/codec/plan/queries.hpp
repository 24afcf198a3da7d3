#pragma once
// The query tokens of a batch, in FlashInfer's convention: request r brings
// q_len[r] = qo_indptr[r + 1] − qo_indptr[r] ≥ 1 tokens, rows qo_indptr[r] ..
// qo_indptr[r + 1] of q and out, which are the last q_len[r] tokens of its KV
// (draft tokens to verify, a chunk of a prompt). A plan's "requests" are its
// query tokens: every one of a request's tokens reads every node on its path,
// so a shared node's rows grow to Σ q_len × G while its KV is still read
// once (docs/DESIGN.md §8). Which keys a token sees is its mask: a key
// interval [lo, hi) of its request's positions, with, for custom and draft
// masks, a bit per key from some position on.
#include <cstdint>
#include <span>
#include <vector>

#include "codec/forest/forest.hpp"

namespace codec {

enum class QueryMask : std::uint8_t {
  none,    // every key of its request
  causal,  // token i of a request of kv_len keys and q_len tokens sees key j iff j ≤ kv_len − q_len + i
  custom,  // a [q_len, kv_len] bit matrix per request, row i the keys token i sees (overrides causal)
  draft,   // a [q_len, q_len] bit matrix per request over its own new tokens (a draft tree): token i sees
           // every key before them and new token j iff bit (i, j); engines build it for tree verification
};

struct QueryBatch {
  std::span<const std::int32_t> qo_indptr;  // [B + 1] from 0, increasing; empty: one token per request
  QueryMask mask = QueryMask::causal;
  // custom and draft: each request's matrix row-major in little bit order
  // (bit k of byte b is bit 8b + k), requests concatenated, each from a byte
  // boundary: FlashInfer's packed_custom_mask; mask_byte_offsets gives them.
  std::span<const std::uint8_t> mask_bits;
  // A sliding window besides the mask (FlashInfer's window_left; −1: none):
  // token i of a request of kv_len keys and q_len tokens sees no key j <
  // kv_len − q_len + i − window_left, i.e. window_left + 1 keys up to its own.
  int window_left = -1;

  bool one_token_each() const { return qo_indptr.empty(); }
  int num_queries(int batch) const { return one_token_each() ? batch : qo_indptr.back(); }
  int q_len(int r) const { return one_token_each() ? 1 : qo_indptr[r + 1] - qo_indptr[r]; }
  // Throws codec::Error naming the argument and value, for requests of
  // kv_len[r] KV tokens: qo_indptr not [B + 1] from 0 and increasing, a
  // request of more query tokens than KV tokens, mask bits of another length
  // than the requests' matrices take, window_left below −1.
  void validate(std::span<const std::int64_t> kv_len) const;
  // Whether token i of request r (of kv_len KV tokens) sees key j: the mask's
  // definition, as the fp64 reference applies it. `mask_byte` is the
  // request's first byte in mask_bits (mask_byte_offsets).
  bool sees(int r, int i, std::int64_t j, std::int64_t kv_len, std::int64_t mask_byte) const;
};

// Where each request's mask starts in mask_bits, in bytes, and the end: [B + 1].
std::vector<std::int64_t> mask_byte_offsets(std::span<const std::int64_t> kv_len, const QueryBatch& queries);
// The KV tokens of each of the forest's requests.
std::vector<std::int64_t> request_lengths(const Forest& forest);

}  // namespace codec
