// IR-in / CHECK-out pass tests (as LLVM's FileCheck, reduced): the printed IR after a pass is matched
// against CHECK lines.
//
//   CHECK: text       the next line (at or after the current one) containing `text`
//   CHECK-NEXT: text  the line right after the previous match contains `text`
//   CHECK-SAME: text  the previous match's line contains `text` after the previous match
//   CHECK-NOT: text   `text` does not occur between the previous match and the next positive match (or the end)
//
// Patterns are literal text; surrounding whitespace is ignored. A failure names the CHECK's line
// (`source:line`), the directive and where in the output the search began.
#ifndef CJIT_TESTS_IR_CHECK_H_
#define CJIT_TESTS_IR_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cjit::testing {

// Matches `output` against the CHECK directives in `checks` (other lines are ignored; a directive may
// follow a `#` or `//` comment marker). `source` names the checks in messages. An error when `checks` has none.
absl::Status MatchChecks(absl::string_view output, absl::string_view checks, absl::string_view source = "<checks>");

// Parses `ir` (compiler/ir/text.h; `#` starts a comment), runs the named pipeline passes
// (compiler/passes/pipeline.h) with flags `flags` (CJIT_FLAGS grammar), prints the result and matches
// `checks` against it; with `checks` empty, the pass must leave the printed IR unchanged. The printed
// result goes to *printed when not null.
absl::Status RunPassAndCheck(absl::string_view ir, const std::vector<std::string>& passes, absl::string_view checks,
                             absl::string_view flags = "", absl::string_view source = "<checks>",
                             std::string* printed = nullptr);

// An IR test file: `# RUN: pass[,pass]` (required), `# FLAGS: --a=1` (optional), the IR, and `# CHECK` lines
// (none: the passes must not change the graph).
absl::Status RunIrTestFile(const std::string& path, std::string* printed = nullptr);

}  // namespace cjit::testing

#endif  // CJIT_TESTS_IR_CHECK_H_
