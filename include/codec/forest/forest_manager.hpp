#pragma once
// Prefix forest manager, for callers that let the library own the page pool:
// a radix tree over token ids at page granularity. Full pages whose tokens and
// prefix match are shared; where sequences diverge inside a page, that page is
// copied for each branch (copy-on-write), so every request's page list stays a
// standard page table. The manager moves no KV data: it tells the caller which
// page contents to copy and which token slots to fill.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codec/forest/forest.hpp"
#include "codec/forest/page_copy.hpp"

namespace codec {

// What a caller must do to the KV pool after an operation: first apply the
// copies in order, then write the KV of tokens [write_begin, write_end) of the
// request (token t lives in page pages(id)[t / page_size], slot t % page_size).
struct KvEffects {
  std::vector<PageCopy> copies;
  std::int64_t write_begin = 0;
  std::int64_t write_end = 0;
};

class ForestManager {
 public:
  using RequestId = std::int32_t;

  ForestManager(int page_size, std::int64_t num_pages);
  ~ForestManager();
  ForestManager(const ForestManager&) = delete;
  ForestManager& operator=(const ForestManager&) = delete;

  // Adds a request for `tokens` (non-empty), sharing the longest prefix of
  // whole pages already held; effects.write_begin is the number of tokens whose
  // KV is reused. Throws codec::Error if the pool runs out (nothing changes then).
  RequestId insert(std::span<const std::int32_t> tokens, KvEffects* effects = nullptr);
  // A new request with the same tokens, sharing every page, the last one too.
  RequestId fork(RequestId id);
  // Appends one token; a shared last page is copied first (copy-on-write).
  void append(RequestId id, std::int32_t token, KvEffects* effects = nullptr);
  // Drops the request; pages nobody references go back to the free list.
  void release(RequestId id);

  bool alive(RequestId id) const;
  std::span<const std::int32_t> pages(RequestId id) const;
  std::span<const std::int32_t> tokens(RequestId id) const;
  std::vector<RequestId> live_requests() const;  // ascending ids

  int page_size() const;
  std::int64_t num_pages() const;
  std::int64_t free_pages() const;
  std::int32_t ref_count(std::int32_t page) const;

  // Page tables of the live requests in ascending id order.
  struct Tables {
    std::vector<RequestId> ids;
    std::vector<std::int32_t> indptr, indices, last_page_len;
    PageTable view(std::int64_t num_pages, int page_size) const;
  };
  Tables page_tables() const;
  // The forest of the live requests (request r = live_requests()[r]), built from
  // the manager's own tree; equal to derive_forest(page_tables()) up to node order.
  Forest forest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace codec
