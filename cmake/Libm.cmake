# Libm.cmake - libm, where the C library keeps it apart (included by CMakeLists.txt).
#
# Sets RG_LIBM. The CPU backend's threads are its own POSIX threads (src/cpu/pool.c),
# linked with Threads::Threads by Library.cmake; no OpenMP runtime is used.

find_library(RG_LIBM m)
mark_as_advanced(RG_LIBM)
