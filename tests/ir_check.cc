#include "tests/ir_check.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "compiler/ir/text.h"
#include "compiler/passes/pipeline.h"
#include "runtime/session.h"

namespace cjit::testing {
namespace {

struct Directive {
  enum Kind { kCheck, kNext, kSame, kNot } kind;
  std::string pattern;
  int line;  // in the checks text, 1-based
};

const char* KindName(Directive::Kind k) {
  switch (k) {
    case Directive::kCheck: return "CHECK";
    case Directive::kNext: return "CHECK-NEXT";
    case Directive::kSame: return "CHECK-SAME";
    case Directive::kNot: return "CHECK-NOT";
  }
  return "?";
}

std::vector<Directive> ParseDirectives(absl::string_view checks) {
  std::vector<Directive> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(checks, '\n')) {
    ++line_no;
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&l, "#") || absl::ConsumePrefix(&l, "//")) l = absl::StripLeadingAsciiWhitespace(l);
    static const std::pair<const char*, Directive::Kind> kPrefixes[] = {
        {"CHECK-NEXT:", Directive::kNext}, {"CHECK-SAME:", Directive::kSame},
        {"CHECK-NOT:", Directive::kNot},   {"CHECK:", Directive::kCheck}};
    for (const auto& [prefix, kind] : kPrefixes) {
      if (absl::ConsumePrefix(&l, prefix)) {
        out.push_back({kind, std::string(absl::StripAsciiWhitespace(l)), line_no});
        break;
      }
    }
  }
  return out;
}

}  // namespace

absl::Status MatchChecks(absl::string_view output, absl::string_view checks, absl::string_view source) {
  std::vector<Directive> ds = ParseDirectives(checks);
  if (ds.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no CHECK directive"));
  std::vector<std::string> lines = absl::StrSplit(output, '\n');
  // Position: the line of the previous match and the column after it; -1 before the first match.
  int cur_line = -1;
  size_t cur_col = 0;
  std::vector<const Directive*> pending_not;
  auto fail = [&](const Directive& d, const std::string& what) {
    std::string context = cur_line < 0 ? "the start of the output"
                                       : absl::StrCat("output line ", cur_line + 1, ": ", lines[cur_line]);
    return absl::NotFoundError(absl::StrCat(source, ":", d.line, ": error: ", KindName(d.kind), ": ", what,
                                            "\n  pattern: ", d.pattern, "\n  after ", context, "\n--- output ---\n",
                                            output));
  };
  // The CHECK-NOTs pending since the previous match must not occur before (line, col).
  auto check_nots = [&](int end_line, size_t end_col) -> absl::Status {
    for (const Directive* d : pending_not) {
      for (int l = std::max(cur_line, 0); l <= end_line && l < static_cast<int>(lines.size()); ++l) {
        size_t from = l == cur_line ? cur_col : 0;
        size_t to = l == end_line ? end_col : lines[l].size();
        size_t at = lines[l].find(d->pattern, from);
        if (at != std::string::npos && at < to) {
          cur_line = l;
          cur_col = at;
          return fail(*d, "excluded string found");
        }
      }
    }
    pending_not.clear();
    return absl::OkStatus();
  };
  for (const Directive& d : ds) {
    switch (d.kind) {
      case Directive::kNot:
        pending_not.push_back(&d);
        break;
      case Directive::kSame: {
        if (cur_line < 0) return fail(d, "no previous match on whose line to look");
        size_t at = lines[cur_line].find(d.pattern, cur_col);
        if (at == std::string::npos) return fail(d, "expected string not found on the same line");
        CJIT_RETURN_IF_ERROR(check_nots(cur_line, at));
        cur_col = at + d.pattern.size();
        break;
      }
      case Directive::kNext: {
        const int next = cur_line + 1;
        if (next >= static_cast<int>(lines.size()) || lines[next].find(d.pattern) == std::string::npos) {
          return fail(d, "expected string not found on the next line");
        }
        size_t at = lines[next].find(d.pattern);
        CJIT_RETURN_IF_ERROR(check_nots(next, at));
        cur_line = next;
        cur_col = at + d.pattern.size();
        break;
      }
      case Directive::kCheck: {
        bool found = false;
        for (int l = std::max(cur_line, 0); l < static_cast<int>(lines.size()); ++l) {
          size_t at = lines[l].find(d.pattern, l == cur_line ? cur_col : 0);
          if (at == std::string::npos) continue;
          CJIT_RETURN_IF_ERROR(check_nots(l, at));
          cur_line = l;
          cur_col = at + d.pattern.size();
          found = true;
          break;
        }
        if (!found) return fail(d, "expected string not found");
        break;
      }
    }
  }
  return check_nots(static_cast<int>(lines.size()) - 1, std::string::npos);
}

absl::Status RunPassAndCheck(absl::string_view ir, const std::vector<std::string>& passes, absl::string_view checks,
                             absl::string_view flags, absl::string_view source, std::string* printed) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ParseGraph(ir));
  const std::string before = PrintGraph(*g);
  CJIT_ASSIGN_OR_RETURN(Flags f, ParseFlags(flags, Flags{}, source));
  CJIT_RETURN_IF_ERROR(CheckPassNames(passes, source));
  std::vector<const Pass*> selected;
  for (const std::string& p : passes) selected.push_back(FindPass(p));
  PassContext ctx;
  ctx.flags = &f;
  ctx.clustering = ClusteringOptionsFor(f, /*session_default=*/true);
  CJIT_RETURN_IF_ERROR(RunPasses(*g, selected, ctx, {}, {}, /*only_if_applies=*/false).status());
  const std::string after = PrintGraph(*g);
  if (printed != nullptr) *printed = after;
  if (ParseDirectives(checks).empty()) {
    if (after != before) {
      return absl::FailedPreconditionError(absl::StrCat(source, ": expected no change; before:\n", before,
                                                        "after:\n", after));
    }
    return absl::OkStatus();
  }
  return MatchChecks(after, checks, source);
}

absl::Status RunIrTestFile(const std::string& path, std::string* printed) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string content = ss.str();
  std::vector<std::string> passes;
  std::string flags;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&l, "# RUN:")) {
      for (absl::string_view p : absl::StrSplit(l, ',', absl::SkipWhitespace())) {
        passes.emplace_back(absl::StripAsciiWhitespace(p));
      }
    } else if (absl::ConsumePrefix(&l, "# FLAGS:")) {
      flags = std::string(absl::StripAsciiWhitespace(l));
    }
  }
  if (passes.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no '// RUN: pass' line"));
  return RunPassAndCheck(content, passes, content, flags, path, printed);
}

}  // namespace cjit::testing
