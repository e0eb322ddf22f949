/* launcher.c: the `dsampler` command. It blocks the stop signals (SIGTERM, SIGUSR1, SIGINT) and
 * executes the program proper, dsampler-bin, beside it (or in ../libexec/dsampler/).
 *
 * Why: the program links some sixty shared libraries (MPI, HDF5, CUDA, ...); the dynamic loader
 * takes a few tenths of a second to map them before main can install its handler, and a stop
 * signal in that window (Slurm's --signal after a requeue, a scheduler's SIGTERM) would kill the
 * rank with no checkpoint and no message. A blocked signal stays pending across execve, so the
 * program's main, which installs its handler and then unblocks (signals.h), receives it and stops
 * at its first checkpoint as it would later. This file needs nothing but the C library and is
 * linked statically where the toolchain can, so that no loader runs before it.
 *
 * On x86-64 the mask is set by the program's very first instructions: the entry point is
 * launcher_entry below, one rt_sigprocmask system call before the C library's own _start (whose
 * start-up, under load, can be descheduled for milliseconds before main). What is left is the
 * kernel's return from execve to that first instruction, which no program can guard: a signal
 * sent there finds the handlers execve reset, as for any process. Elsewhere main blocks them
 * first thing. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PROGRAM "dsampler-bin"

#if defined(__x86_64__) && defined(__linux__)
/* rt_sigprocmask(SIG_BLOCK, {SIGINT, SIGUSR1, SIGTERM}, NULL, 8), then _start with the registers
 * it reads as the kernel left them: rsp at argc, rdx 0 (no loader's finalizer). Bit n - 1 of the
 * mask is signal n: SIGINT 2, SIGUSR1 10, SIGTERM 15. CMakeLists.txt makes this the entry point. */
__asm__(".text\n"
        ".globl launcher_entry\n"
        ".type launcher_entry, @function\n"
        "launcher_entry:\n"
        "  movl $14, %eax\n"            /* SYS_rt_sigprocmask */
        "  xorl %edi, %edi\n"           /* SIG_BLOCK */
        "  leaq launcher_stops(%rip), %rsi\n"
        "  xorl %edx, %edx\n"           /* no old mask */
        "  movl $8, %r10d\n"            /* the kernel's sigset_t, 64 bits */
        "  syscall\n"
        "  xorl %edx, %edx\n"
        "  jmp _start\n"
        ".size launcher_entry, . - launcher_entry\n"
        ".section .rodata\n"
        ".balign 8\n"
        "launcher_stops:\n"
        "  .quad (1 << (2 - 1)) | (1 << (10 - 1)) | (1 << (15 - 1))\n"
        ".text\n");
#endif

/* DIR/suffix into out when that file is executable. */
static int candidate(char *out, size_t size, const char *dir, const char *suffix) {
  int n = snprintf(out, size, "%s/%s", dir, suffix);
  return n > 0 && (size_t)n < size && access(out, X_OK) == 0;
}

int main(int argc, char **argv) {
  (void)argc;
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGUSR1);
  sigaddset(&stops, SIGINT);
  sigprocmask(SIG_BLOCK, &stops, NULL);

  char self[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "dsampler: error: cannot find this program's own path (/proc/self/exe): %s\n", strerror(errno));
    return 1;
  }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) *slash = '\0';
  if (!candidate(path, sizeof path, self, PROGRAM) && !candidate(path, sizeof path, self, "../libexec/dsampler/" PROGRAM)) {
    fprintf(stderr, "dsampler: error: the program %s is missing: looked for %s/%s and %s/../libexec/dsampler/%s "
            "(install both files of dsampler together)\n", PROGRAM, self, PROGRAM, self, PROGRAM);
    return 1;
  }
  execv(path, argv);
  fprintf(stderr, "dsampler: error: cannot run %s: %s\n", path, strerror(errno));
  return 1;
}
