#include "mixprec/core/profiler.h"

namespace mixprec::profiler {

void Profile::add(std::string_view name, double seconds, bool in_backward) {
  auto it = entries_.find(name);
  if (it == entries_.end()) it = entries_.emplace(std::string(name), Entry{}).first;
  Entry& e = it->second;
  (in_backward ? e.backward_seconds : e.seconds) += seconds;
  ++(in_backward ? e.backward_calls : e.calls);
}

double Profile::total_seconds() const {
  double total = 0;
  for (const auto& [name, entry] : entries_) total += entry.seconds + entry.backward_seconds;
  return total;
}

}  // namespace mixprec::profiler
