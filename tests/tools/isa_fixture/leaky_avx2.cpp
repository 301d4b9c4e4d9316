// A unit compiled with AVX2 flags that breaks the rule tools/check_isa_units.py enforces: it
// emits an out-of-line copy of a template that generic units could instantiate too (a weak
// symbol), so the checker must name it (tools.check_isa_units_selftest).
namespace isa_fixture {

template <typename T>
[[gnu::noinline]] T shared_sum(const T* x, int n) {
  T s = 0;
  for (int i = 0; i < n; ++i) s += x[i];
  return s;
}

int use(const int* x, int n) { return shared_sum(x, n); }

}  // namespace isa_fixture
