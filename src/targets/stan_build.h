/* stan_build.h: compiling a Stan model into a target plugin of ABI version 2. stanc (from the
 * httpstan wheel, see src/targets/stan/install-stan.sh) translates the model to C++; a C++ compiler
 * builds it against Stan Math and links it with dsampler's shim (src/targets/stan/shim.cpp, kept in
 * this program's text, so the program needs no file beside it). Libraries are kept in a cache
 * keyed by the content hash of what goes into them (the C++ stanc writes, the shim, the
 * compiler, its flags, the toolchain): an unchanged model is compiled once. The parts that
 * every model shares (Stan Math's headers as a precompiled header, the shim's object) are
 * built once per toolchain. */
#ifndef DSAMPLER_STAN_BUILD_H
#define DSAMPLER_STAN_BUILD_H

#include <mpi.h>
#include <stddef.h>

/* Collective over comm: rank 0 finds model_path's library in the cache or builds it, and every
 * rank leaves with its path in library (or the same error: a stanc message naming the model
 * and line, a compiler failure with the log's place, a missing toolchain). verbose: rank 0
 * says on stderr when it compiles, and prints stanc's warnings. */
int stan_build_library(const char *model_path, MPI_Comm comm, int verbose, char *library, size_t size);

/* `dsampler stan MODEL.stan [--quiet]`: builds (or finds) the model's library and prints its
 * path on stdout, for --target plugin:PATH or for building once before a job. Collective. */
int stan_main(MPI_Comm comm, int argc, char **argv);

/* The embedded sources (stan_embedded.c, made by CMake from src/targets/stan/shim.cpp and
 * src/shared/dsampler_target.h). */
extern const char stan_shim_source[];
extern const char stan_target_header[];

#endif
