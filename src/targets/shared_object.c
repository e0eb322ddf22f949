/* shared_object.c: the checks of shared_object.h. */
#include "shared_object.h"

#include <elf.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "status.h"

/* end = offset + count * size, 0 where that overflows. */
static int extent(unsigned long long offset, unsigned long long count, unsigned long long size,
                  unsigned long long *end) {
  unsigned long long bytes;
  return !__builtin_mul_overflow(count, size, &bytes) && !__builtin_add_overflow(offset, bytes, end);
}

int shared_object_check(const char *what, const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) return ds_fail(DS_ERR_INPUT, "%s %s: cannot open: %s", what, path, strerror(errno));
  struct stat st;
  Elf64_Ehdr header;
  int status = DS_OK;
  if (fstat(fileno(file), &st) != 0)
    status = ds_fail(DS_ERR_INPUT, "%s %s: cannot stat: %s", what, path, strerror(errno));
  else if (fread(&header, sizeof header, 1, file) != 1 || memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
    status = ds_fail(DS_ERR_INPUT, "%s %s: not a shared library (no ELF header; %lld bytes)", what, path,
                     (long long)st.st_size);
  else if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
    status = ds_fail(DS_ERR_INPUT, "%s %s: not a 64-bit little-endian shared library", what, path);
  else if (header.e_type != ET_DYN && header.e_type != ET_EXEC)
    status = ds_fail(DS_ERR_INPUT, "%s %s: an ELF file but no shared library (type %u)", what, path,
                     (unsigned)header.e_type);
  const unsigned long long size = (unsigned long long)st.st_size;
  unsigned long long end = 0;
  if (status == DS_OK && header.e_phnum &&
      (header.e_phentsize != sizeof(Elf64_Phdr) || !extent(header.e_phoff, header.e_phnum, header.e_phentsize, &end) ||
       end > size))
    status = ds_fail(DS_ERR_INPUT, "%s %s: truncated or damaged (its program headers end past the file's %llu "
                     "bytes)", what, path, size);
  if (status == DS_OK && header.e_shnum &&
      (!extent(header.e_shoff, header.e_shnum, header.e_shentsize, &end) || end > size))
    status = ds_fail(DS_ERR_INPUT, "%s %s: truncated or damaged (its section headers end at byte %llu, the file "
                     "has %llu)", what, path, end, size);
  for (int i = 0; status == DS_OK && i < header.e_phnum; ++i) {
    Elf64_Phdr segment;
    if (fseek(file, (long)(header.e_phoff + (unsigned long long)i * sizeof segment), SEEK_SET) != 0 ||
        fread(&segment, sizeof segment, 1, file) != 1) {
      status = ds_fail(DS_ERR_INPUT, "%s %s: cannot read its program header %d", what, path, i);
      break;
    }
    if (segment.p_type != PT_LOAD && segment.p_type != PT_DYNAMIC) continue;
    if (!extent(segment.p_offset, 1, segment.p_filesz, &end) || end > size)
      status = ds_fail(DS_ERR_INPUT, "%s %s: truncated or damaged (a segment it loads ends at byte %llu, the file "
                       "has %llu); rebuild or copy it again", what, path, end, size);
  }
  fclose(file);
  return status;
}

int shared_object_sha256(const char *path, char hex[65]) {
  FILE *file = fopen(path, "rb");
  if (!file) return ds_fail(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
  unsigned char buffer[1 << 16], digest[EVP_MAX_MD_SIZE];
  size_t got;
  while (ok && (got = fread(buffer, 1, sizeof buffer, file)) > 0) ok = EVP_DigestUpdate(ctx, buffer, got) == 1;
  unsigned int length = 0;
  ok = ok && !ferror(file) && EVP_DigestFinal_ex(ctx, digest, &length) == 1 && length == 32;
  EVP_MD_CTX_free(ctx);
  fclose(file);
  if (!ok) return ds_fail(DS_ERR_IO, "%s: cannot read it to its end", path);
  for (unsigned i = 0; i < 32; ++i) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  return DS_OK;
}
