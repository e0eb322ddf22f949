/* shared_object.h: a shared library checked before dlopen maps it. dlopen trusts the file's
 * headers: a truncated library (a copy cut short, a full disk while it was written) maps pages
 * past the end of the file and the first touch of them kills the process with SIGBUS. */
#ifndef DSAMPLER_SHARED_OBJECT_H
#define DSAMPLER_SHARED_OBJECT_H

#include <stddef.h>

/* Local. DS_OK when `path` is a 64-bit little-endian ELF shared object (or executable) whose
 * program headers, loaded segments and section headers all lie inside the file; else
 * DS_ERR_INPUT, the message "<what> <path>: ..." saying what is wrong. */
int shared_object_check(const char *what, const char *path);

/* Local. The SHA-256 of the file at `path` as 64 hex digits into hex[65]; DS_ERR_IO where it
 * cannot be read. */
int shared_object_sha256(const char *path, char hex[65]);

#endif
