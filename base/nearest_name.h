// "Did you mean": the candidate nearest to a misspelled name (Levenshtein edit distance), for errors that
// name an unknown flag, pass or option. Thread-safe (pure functions).
#ifndef CJIT_BASE_NEAREST_NAME_H_
#define CJIT_BASE_NEAREST_NAME_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cjit {

// Insertions, deletions and substitutions that turn `a` into `b` (Levenshtein, 1966).
size_t EditDistance(absl::string_view a, absl::string_view b);

// The candidate within max(3, |name| / 3) edits of `name` with the fewest (the first on ties), or "".
std::string NearestName(absl::string_view name, const std::vector<std::string>& candidates);

}  // namespace cjit

#endif  // CJIT_BASE_NEAREST_NAME_H_
