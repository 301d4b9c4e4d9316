#pragma once
// A kernel choice as an ordered list of candidates, best first, as oneDNN's implementation
// lists: each candidate needs a kernel level and says whether it takes a problem (shape,
// dtypes, layout); the first that takes it at the level in force runs. The list ends with a
// reference that takes everything at the scalar level, so a choice always exists (checked at
// compile time by pick()'s callers through ends_with_reference).
//
// Families whose candidates differ only by level use IsaTable (core/cpu_features.h) instead:
// the same rule with no `takes`.
#include <array>
#include <cstddef>
#include <string_view>

#include "mixprec/core/cpu_features.h"

namespace mixprec::kernels {

// `Problem` is what `takes` looks at; `Kernel` is what the caller runs (a function pointer, or
// a value such as the dtype weights are packed for).
template <typename Problem, typename Kernel>
struct Candidate {
  std::string_view name;           // for messages, tests and docs
  IsaLevel level;                  // skipped when the level in force is below it
  bool (*takes)(const Problem&);   // null: any problem at its level
  Kernel kernel;
};

template <typename Problem, typename Kernel, std::size_t N>
constexpr bool ends_with_reference(const std::array<Candidate<Problem, Kernel>, N>& list) {
  return N > 0 && list[N - 1].level == IsaLevel::Scalar && list[N - 1].takes == nullptr;
}

template <typename Problem, typename Kernel, std::size_t N>
const Candidate<Problem, Kernel>& pick(const std::array<Candidate<Problem, Kernel>, N>& list,
                                       const Problem& problem, IsaLevel level) {
  for (const Candidate<Problem, Kernel>& c : list)
    if (level >= c.level && (c.takes == nullptr || c.takes(problem))) return c;
  return list[N - 1];  // unreachable when the list ends with a reference
}

}  // namespace mixprec::kernels
