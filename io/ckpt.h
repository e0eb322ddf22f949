/* ckpt.h: checkpoints in parallel HDF5 (DESIGN.md, I/O). A checkpoint holds global per-item
 * arrays (any rank count can read them back, each rank its own rows), a few global values the
 * same on every rank, and the run's metadata. Written collectively to ckpt-<iteration>.h5.tmp,
 * flushed, closed, then renamed by rank 0 after a barrier and the directory synced; the last
 * `keep` are kept. Each array carries a checksum, so a damaged file is refused, not used. */
#ifndef DSAMPLER_CKPT_H
#define DSAMPLER_CKPT_H

#include <mpi.h>
#include <stdint.h>

/* Written: 6 (strings fixed-length). Read: 5 and 6 (5's strings are variable-length). */
#define CKPT_FORMAT_VERSION 6
#define CKPT_CONFIG_MAX 16384
/* The fingerprints of the files a run reads (run_context.h), one line each. */
#define CKPT_INPUTS_MAX 32768

typedef enum { CKPT_FLOAT32 = 0, CKPT_FLOAT64 = 1 } ckpt_dtype_t;

/* A per-item array [n_items, width]; `local` holds this rank's rows [row_begin, row_end). */
typedef struct ckpt_array {
  const char *name;
  ckpt_dtype_t dtype;
  int64_t width;
  void *local;
} ckpt_array_t;

/* A global array of `count` doubles, identical on every rank. */
typedef struct ckpt_global {
  const char *name;
  int64_t count;
  double *values;
} ckpt_global_t;

typedef struct ckpt_meta {
  char algorithm[16];
  int64_t iteration;      /* iterations completed */
  int64_t draws_written;  /* draws the output holds at this checkpoint */
  int64_t n_items, dim;
  uint64_t seed;
  char target[256];
  char run_id[64];        /* also in the output file's root attributes: pairs the two */
  char config[CKPT_CONFIG_MAX]; /* the run's options (config_write_checkpoint_text) */
  char inputs[CKPT_INPUTS_MAX]; /* the run's input files as it started ("" in older checkpoints) */
  /* Rank 0's working folder at the run's start, absolute ("" in older checkpoints): the paths in
   * config stay as they were given, and relative ones are from here (a resume works in it). */
  char start_dir[4096];
} ckpt_meta_t;

/* Collective. Writes DIR/ckpt-<iteration>.h5 and removes all but the newest `keep`. */
int ckpt_write(MPI_Comm comm, const char *dir, const ckpt_meta_t *meta, const ckpt_array_t *arrays, int n_arrays,
               const ckpt_global_t *globals, int n_globals, int64_t row_begin, int64_t row_end, int keep);

/* Collective. The checkpoints at `where` (a checkpoint file, or a directory's ckpt-*.h5),
 * newest first, into paths[0 .. *count). Rank 0 looks; every rank gets the list. */
#define CKPT_LIST_MAX 64
int ckpt_list(MPI_Comm comm, const char *where, char paths[][4096], int *count);

/* The checksum of meta as a checkpoint of format `version` stores it (meta_checksum): for tests
 * that forge a checkpoint of an older format. */
uint64_t ckpt_meta_checksum(const ckpt_meta_t *meta, int version);

/* Collective. Opens `path` and reads its metadata, checking the format version. */
int ckpt_read_meta(MPI_Comm comm, const char *path, ckpt_meta_t *meta);

/* Collective. Reads this rank's rows of each array and every global; checks shapes and
 * checksums against the file. */
int ckpt_read(MPI_Comm comm, const char *path, const ckpt_array_t *arrays, int n_arrays, ckpt_global_t *globals,
              int n_globals, int64_t row_begin, int64_t row_end, int64_t n_items);

/* Local: 1 when `path` is named as a checkpoint is (ckpt-<N>.h5, or its .tmp) or is an HDF5 file
 * holding a checkpoint's format_version: a file that resume would read as a checkpoint, which no
 * output may overwrite or be mistaken for. */
int ckpt_is_checkpoint_path(const char *path);

/* *found = 1 when DIR holds at least one ckpt-*.h5; DS_ERR_INPUT, naming it, where something there
 * under a checkpoint's name is not a regular file (a directory, a link, a FIFO: that checkpoint
 * could not be written); with run_id, `other` (other_size bytes) gets
 * the run id of a checkpoint there that belongs to another run ("" where none does). Rank 0
 * looks; the answers are broadcast. Collective. */
int ckpt_dir_checkpoints(MPI_Comm comm, const char *dir, const char *run_id, int *found, char *other,
                         size_t other_size);

#endif
