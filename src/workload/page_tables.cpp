#include "codec/workload/workload.hpp"

namespace codec {

WorkloadTables workload_page_tables(const Workload& w) {
  w.validate();
  WorkloadTables out;
  out.page_size = w.page_size;
  // An upper bound: every request alone, each rounded up to whole pages.
  for (int r = 0; r < int(w.requests.size()); ++r) out.num_pages += (w.request_tokens(r) + w.page_size - 1) / w.page_size;
  ForestManager manager(w.page_size, out.num_pages);
  for (int r = 0; r < int(w.requests.size()); ++r) manager.insert(request_token_ids(w, r));
  out.tables = manager.page_tables();
  return out;
}

}  // namespace codec
