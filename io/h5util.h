/* h5util.h: the one way dsampler opens HDF5 files in parallel (checkpoints, --init, --data,
 * summary) and turns their failures into one line naming the file. Every rank checks a path
 * before any collective open, so a directory, a FIFO or a missing file is refused with the
 * system's reason instead of MPI-IO noise or a hang; HDF5's own error printing is off and its
 * innermost message goes into the recorded error; every failure is agreed over the file's
 * communicator before the next collective. */
#ifndef DSAMPLER_H5UTIL_H
#define DSAMPLER_H5UTIL_H

#include <hdf5.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* Once per process, before any other HDF5 call: initialises the library and turns its
 * automatic error printing off (HDF5-DIAG stacks never reach the user). */
void h5util_init(void);

/* Records "what: HDF5's innermost message" as the current error (DS_ERR_IO unless `code`
 * says otherwise) and clears HDF5's error stack. `what` names the file and the step. */
int h5util_fail(int code, const char *what);

/* The file the calling thread reads or writes, in the user's words ("--out run.h5",
 * "checkpoint ckpt/ckpt-5.h5.tmp"), printf-style: what a failed HDF5 call's message (h5_fail)
 * names. Per thread (the output's writer thread writes beside a checkpoint); it stays until set
 * again, so every entry point of io/ that makes HDF5 calls sets it first. */
void h5util_set_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The calling thread's context, "an HDF5 file" when none was set. */
const char *h5util_context(void);
/* The file the calling thread writes, after h5util_set_context (which clears it): a failure
 * recorded by h5util_fail while its file system has less than H5UTIL_DISK_FULL_BYTES free says
 * the disk is full. */
void h5util_set_write_path(const char *path);
#define H5UTIL_DISK_FULL_BYTES ((double)(1 << 20))
/* A file HDF5 cannot close after a write failed on some rank (its collective close would
 * diverge between the ranks) is left open and counted here: the program must then end without
 * MPI_Finalize, whose HDF5 clean-up would wait or crash on it. */
void h5util_left_open(void);
int h5util_unclosed(void);
/* The output file this run holds the lock on (run.c; NULL once released), on every rank: a file
 * that then fails to open is damaged, not being written by another run, since the lock the
 * open's diagnosis probes for is the run's own. */
void h5util_set_locked_output(const char *path);
/* Fault injection for the tests: DSAMPLER_FAULT_SKIP_SPACE_CHECK=1 skips the free-space checks
 * (the run's output before work, the output's growth, each checkpoint), as a disk filled by
 * someone else between a check and its write. */
int h5util_space_check_skipped(void);

/* Checks that `path` (named `option` in messages: "--data", "checkpoint") is a regular,
 * readable file of at most max_bytes (0: no limit). Local; no collective. */
int h5util_check_input(const char *option, const char *path, int64_t max_bytes);

/* The free bytes of the file system that holds `path` (a file's folder, or the folder itself
 * when is_folder), -1 when unknown; its folder's name into folder[size]. Local. */
double h5util_free_bytes(const char *path, int is_folder, char *folder, size_t size);
/* Slack kept free beside what a write needs: HDF5's metadata, the next checkpoint. */
#define H5UTIL_FREE_SPACE_MARGIN ((double)(4 << 20))

/* Every rank leaves with the status and message of the lowest failing rank (comm_agree_on). */
int h5util_agree(MPI_Comm comm, int status);

/* Collective: checks `path` as an input on every rank, agrees, and opens it read-only with
 * the MPI-IO driver. On failure *file is H5I_INVALID_HID and every rank returns the same
 * status (DS_ERR_INPUT for a file that is not HDF5 or cannot be read). */
int h5util_open_read(MPI_Comm comm, const char *option, const char *path, hid_t *file);

/* Collective: creates (truncates) `path` for writing with collective metadata. Agreed. */
int h5util_create(MPI_Comm comm, const char *option, const char *path, hid_t *file);

/* Bytes of a dataset of `ndims` axes `dims` with elements of elem_size, into *bytes; an error
 * naming option, path and dataset when the count overflows 64 bits or could not be held in
 * this node's memory (a crafted file can declare [2^31, 2^31] in a few bytes). Local. */
int h5util_checked_bytes(const char *option, const char *path, const char *dataset, int ndims, const hsize_t *dims,
                         size_t elem_size, size_t *bytes);

/* 1 when paths a and b name the same existing file (same device and inode). */
int h5util_same_file(const char *a, const char *b);

/* Collective: sets string attributes key[i] = value[i] on the root group of an existing
 * file (replacing those present), with HDF5's variable-length UTF-8 strings as the output
 * writer uses. Agreed. */
int h5util_set_root_attrs(MPI_Comm comm, const char *option, const char *path, const char *const *keys,
                          const char *const *values, int count);

/* Sets string type `type`'s character set to that of attribute `attr` (HDF5 1.10 has no
 * conversion between a variable-length ASCII and UTF-8 string): 0, or -1 where attr is no
 * string. */
int h5util_match_cset(hid_t attr, hid_t type);

/* The string attribute `name` of `object` into out[size], stored fixed- or variable-length and
 * read in its own character set. DS_OK; DS_ERR_IO (out "") where it is missing, not a string,
 * unreadable or longer than size - 1; no HDF5 error stack is printed and none is recorded. A
 * variable-length read runs under the read deadline (comm_deadline_begin), `what` naming the
 * file. Local. */
int h5util_read_string_attr(hid_t object, const char *name, char *out, size_t size, const char *what);

/* Collective: reads string attribute `key` of the root group of `path` into value. Agreed;
 * DS_ERR_INPUT naming the file when absent. */
int h5util_read_root_attr(MPI_Comm comm, const char *option, const char *path, const char *key, char *value,
                          size_t size);

#endif
