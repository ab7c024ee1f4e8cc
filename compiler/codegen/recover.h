// Runs LLVM work so that a fatal error (report_fatal_error aborts) or a crash inside LLVM becomes an
// absl::Status instead of ending the host process (llvm::CrashRecoveryContext, as clang uses it).
// `what` names the work in the error. Thread-safety: may be called concurrently.
#ifndef CJIT_COMPILER_CODEGEN_RECOVER_H_
#define CJIT_COMPILER_CODEGEN_RECOVER_H_

#include <functional>

#include "absl/status/status.h"

namespace cjit {

absl::Status RunLlvmRecoverably(const char* what, const std::function<absl::Status()>& fn);

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_RECOVER_H_
