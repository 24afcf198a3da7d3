#pragma once
// Test support: a forest written out independently of node numbering, so two
// derivations (any request order, the manager vs the page tables) compare.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "codec/forest/forest.hpp"

namespace codec::test {

// request_key[r]: a name for request r that both forests agree on.
inline std::vector<std::string> forest_signature(const Forest& f, const std::vector<int>& request_key) {
  std::vector<std::string> node_sig(f.num_nodes());
  for (int i = 0; i < f.num_nodes(); ++i) {  // parents first, so a parent's signature is ready
    const ForestNode& n = f.nodes[i];
    std::vector<int> reqs;
    for (int k = 0; k < n.num_reqs; ++k) reqs.push_back(request_key[f.reqs[n.req_begin + k]]);
    std::sort(reqs.begin(), reqs.end());
    std::ostringstream os;
    os << "tokens " << n.num_tokens << " pages";
    for (int p = 0; p < n.num_pages; ++p) os << ' ' << f.pages[n.page_begin + p];
    os << " reqs";
    for (int r : reqs) os << ' ' << r;
    os << " under [" << (n.parent < 0 ? std::string("root") : node_sig[n.parent]) << "]";
    node_sig[i] = os.str();
  }
  std::sort(node_sig.begin(), node_sig.end());
  return node_sig;
}

inline std::vector<std::string> forest_signature(const Forest& f) {
  std::vector<int> identity(f.num_requests());
  for (int r = 0; r < f.num_requests(); ++r) identity[r] = r;
  return forest_signature(f, identity);
}

}  // namespace codec::test
