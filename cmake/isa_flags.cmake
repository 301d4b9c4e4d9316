# ISA variants of a kernel live in their own translation units, named by level: <name>_avx2.cpp
# (likewise avx512, avx512bf16, amx), or a unit named after the level alone (avx2.cpp). That
# holds for the units cmake/kernel_levels.cmake generates too. Only those units get the
# level's instruction-set flags, so the rest of the library runs on any x86-64.
set(MIXPREC_FLAGS_AVX2 -mavx2 -mfma -mf16c)
# GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized inside themselves (GCC bug
# 105593, fixed in GCC 13); the warning says nothing about our code there.
set(MIXPREC_FLAGS_AVX512 ${MIXPREC_FLAGS_AVX2} -mavx512f -mavx512bw -mavx512vl -mavx512dq)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND MIXPREC_FLAGS_AVX512 -Wno-maybe-uninitialized -Wno-uninitialized)
endif()
set(MIXPREC_FLAGS_AVX512BF16 ${MIXPREC_FLAGS_AVX512} -mavx512bf16)
# AMX tiles run only behind a runtime check (CPU, XCR0 and the kernel's permission to use them).
set(MIXPREC_FLAGS_AMX ${MIXPREC_FLAGS_AVX512BF16} -mamx-tile -mamx-bf16)

function(mixprec_apply_isa_flags sources)
  foreach(src IN LISTS sources)
    if(src MATCHES "[/_]amx\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${MIXPREC_FLAGS_AMX}")
    elseif(src MATCHES "[/_]avx512bf16\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${MIXPREC_FLAGS_AVX512BF16}")
    elseif(src MATCHES "[/_]avx512\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${MIXPREC_FLAGS_AVX512}")
    elseif(src MATCHES "[/_]avx2\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${MIXPREC_FLAGS_AVX2}")
    endif()
  endforeach()
endfunction()
