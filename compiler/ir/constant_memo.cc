#include "compiler/ir/constant_memo.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

namespace cjit {

std::shared_ptr<const Tensor> DerivedConstant(const std::shared_ptr<const Tensor>& source, uint64_t kind,
                                              const std::function<Tensor()>& make) {
  struct Entry {
    std::weak_ptr<const Tensor> source;  // a freed source's address may be reused: compared on lookup
    std::shared_ptr<const Tensor> derived;
  };
  static std::mutex mu;
  static auto* memo = new std::map<std::pair<const Tensor*, uint64_t>, Entry>();
  static size_t sweep_at = 256;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(source.get(), kind);
  auto it = memo->find(key);
  if (it != memo->end() && it->second.source.lock() == source) return it->second.derived;
  auto derived = std::make_shared<const Tensor>(make());
  (*memo)[key] = Entry{source, derived};
  if (memo->size() >= sweep_at) {  // entries of freed constants (their sessions are gone)
    for (auto e = memo->begin(); e != memo->end();) e = e->second.source.expired() ? memo->erase(e) : std::next(e);
    sweep_at = std::max<size_t>(256, 2 * memo->size());
  }
  return derived;
}

}  // namespace cjit
