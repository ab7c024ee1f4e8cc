// The one propagation macro family of clusterjit (this abseil version has none).
//   CJIT_RETURN_IF_ERROR(expr)        returns expr's status if it is not OK.
//   CJIT_ASSIGN_OR_RETURN(lhs, expr)  evaluates a StatusOr, returns its status on error, else assigns.
#ifndef CJIT_BASE_STATUS_MACROS_H_
#define CJIT_BASE_STATUS_MACROS_H_

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define CJIT_RETURN_IF_ERROR(expr)                        \
  do {                                                    \
    if (::absl::Status cjit_st_ = (expr); !cjit_st_.ok()) \
      return cjit_st_;                                    \
  } while (0)

#define CJIT_CONCAT_INNER_(a, b) a##b
#define CJIT_CONCAT_(a, b) CJIT_CONCAT_INNER_(a, b)
#define CJIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()
#define CJIT_ASSIGN_OR_RETURN(lhs, expr) \
  CJIT_ASSIGN_OR_RETURN_IMPL_(CJIT_CONCAT_(cjit_statusor_, __LINE__), lhs, expr)

namespace cjit {

// Runs fn() (which returns absl::Status or absl::StatusOr<T>). An exception escaping it — std::bad_alloc,
// a TensorError (compiler/ir/tensor.h) for an allocation that cannot be made, a library's exception —
// becomes an error status prefixed with `what`: ResourceExhausted for allocation failures, Internal
// otherwise. Used at the boundaries (Session::Load/Run, background compiles) so no exception reaches a host.
template <typename F>
auto CatchAsStatus(const std::string& what, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unknown exception"));
  }
}

}  // namespace cjit

#endif  // CJIT_BASE_STATUS_MACROS_H_
