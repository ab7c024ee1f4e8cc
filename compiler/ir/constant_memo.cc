#include "compiler/ir/constant_memo.h"

#include <utility>

#include "base/weak_memo.h"

namespace cjit {

std::shared_ptr<const Tensor> DerivedConstant(const std::shared_ptr<const Tensor>& source, uint64_t kind,
                                              const std::function<Tensor()>& make) {
  static auto* memo = new WeakMemo<std::pair<const Tensor*, uint64_t>, const Tensor, std::shared_ptr<const Tensor>>();
  return memo->With({source.get(), kind}, source, [&](std::shared_ptr<const Tensor>& derived) {
    if (derived == nullptr) derived = std::make_shared<const Tensor>(make());
    return derived;
  });
}

}  // namespace cjit
