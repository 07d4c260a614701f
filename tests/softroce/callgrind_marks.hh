#pragma once

// Marks around a measured loop for `valgrind --tool=callgrind` (bench/instructions_per_op.sh):
// `SHOAL_CALLGRIND_ZERO()` drops the counts so far and `SHOAL_CALLGRIND_DUMP("name/N")` writes
// the counts since then as a dump named after the loop and its iteration count. Outside
// callgrind, and where Debian's valgrind package (its header) is not installed, both do nothing.

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define SHOAL_CALLGRIND_ZERO() CALLGRIND_ZERO_STATS
#define SHOAL_CALLGRIND_DUMP(name) CALLGRIND_DUMP_STATS_AT(name)
#else
#define SHOAL_CALLGRIND_ZERO() ((void)0)
#define SHOAL_CALLGRIND_DUMP(name) ((void)(name))
#endif
