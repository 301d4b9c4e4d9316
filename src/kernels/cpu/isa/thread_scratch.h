#pragma once
// Per-thread scratch buffers for the ISA units. A unit compiled with a level's flags must not
// own an object whose inline code (a destructor, a vector's growth) it would emit out of line:
// the linker could hand that copy to generic callers (tools/check_isa_units.py). The buffers
// live in a generic unit (thread_scratch.cpp) and the ISA units hold plain pointers.
#include <cstddef>

namespace mixprec::kernels {

// One buffer per slot and thread.
enum class ScratchSlot { AmxGemmStaging, AmxConvRing, AmxConvRingKeys, AmxConvTaps, Count };

// The calling thread's buffer for `slot`, at least `bytes` long (64-byte aligned) and kept
// across calls; zeroed whenever it grows (contents are otherwise what the last user left).
void* thread_scratch(ScratchSlot slot, std::size_t bytes);

}  // namespace mixprec::kernels
