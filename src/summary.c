/* summary.c: the `summary` command. */
#include "summary.h"

#include "status.h"

int summary_main(comm_ctx_t *comm, int argc, char **argv) {
  (void)comm;
  (void)argc;
  (void)argv;
  return ds_fail(DS_ERR_INPUT, "summary: not available in this version");
}
