/* test_svgd_route.c: svgd_route.h's table walked over d = 1..1100, both kernels, four builds and
 * devices (sm_80; sm_90 built without sm_90a's code; sm_90a on compute capability 9.0; sm_90a's
 * build on a 10.0 device) and every override, against the table's rows as written in its header,
 * re-stated here as data: where a row's range and architecture say, that family and agreement.
 * Also the invariants the numerics rest on: the CPU's bits exactly where the distances are the
 * CPU's forms (direct or the GEMM identity on the CUDA cores), wgmma only on a 9.0 device of an
 * sm_90a build, the fp16 families only from 4 to 64 coordinates (65 and above were once routed
 * there by a padded-width test: the KSD read 64 of 65 coordinates). No GPU needed. */
#include <stdio.h>

#include "svgd_route.h"

typedef struct {
  svgd_op_t op;
  long long lo, hi;      /* dimensions, inclusive */
  int needs_wgmma;       /* 1: only where the device is wgmma's; 0: only where it is not; -1: any */
  int kernel;            /* -1 any, else SVGD_KERNEL_RBF or SVGD_KERNEL_IMQ */
  svgd_family_t family;
  svgd_agreement_t agreement;
} row_t;

/* The header's table, row by row (kernel -1: both). */
static const row_t table[] = {
    {SVGD_OP_MEDIAN, 1, 3, -1, -1, SVGD_FAMILY_DIRECT, SVGD_AGREE_BITWISE_CPU},
    {SVGD_OP_MEDIAN, 4, 32, -1, -1, SVGD_FAMILY_MMA_F16, SVGD_AGREE_FLOAT64_2E6},
    {SVGD_OP_MEDIAN, 33, 64, 1, -1, SVGD_FAMILY_WGMMA_F16, SVGD_AGREE_FLOAT64_2E6},
    {SVGD_OP_MEDIAN, 33, 64, 0, -1, SVGD_FAMILY_MMA_F16, SVGD_AGREE_FLOAT64_2E6},
    {SVGD_OP_MEDIAN, 65, 128, -1, -1, SVGD_FAMILY_DIRECT, SVGD_AGREE_BITWISE_CPU},
    {SVGD_OP_MEDIAN, 129, 1LL << 40, -1, -1, SVGD_FAMILY_GEMM_DIRECT, SVGD_AGREE_BITWISE_CPU},
    {SVGD_OP_PHI, 1, 3, -1, -1, SVGD_FAMILY_DIRECT, SVGD_AGREE_FIXED_ORDER},
    {SVGD_OP_PHI, 4, 32, -1, -1, SVGD_FAMILY_MMA_F16, SVGD_AGREE_FLOAT64_2E6},
    {SVGD_OP_PHI, 33, 64, 1, -1, SVGD_FAMILY_WGMMA_F16, SVGD_AGREE_FLOAT64_2E6},
    {SVGD_OP_PHI, 33, 64, 0, -1, SVGD_FAMILY_MMA_F16, SVGD_AGREE_FLOAT64_2E6},
    {SVGD_OP_PHI, 65, 128, -1, -1, SVGD_FAMILY_DIRECT, SVGD_AGREE_FIXED_ORDER},
    {SVGD_OP_PHI, 129, 1LL << 40, -1, -1, SVGD_FAMILY_WIDE_TF32, SVGD_AGREE_FLOAT64_1E5},
    {SVGD_OP_KSD, 33, 64, 1, SVGD_KERNEL_RBF, SVGD_FAMILY_WGMMA_F16, SVGD_AGREE_FLOAT64_2E6},
};

static int failures = 0;

static void check(int ok, const char *what, long long dim, int arch, int kernel, int override) {
  if (ok) return;
  if (failures++ < 20)
    fprintf(stderr, "FAIL %s (d = %lld, device %d, kernel %d, override %d)\n", what, dim, arch, kernel, override);
}

int main(void) {
  const svgd_arch_t archs[] = {{8, 0, 0}, {9, 0, 0}, {9, 0, 1}, {10, 0, 1}};
  const int kernels[] = {SVGD_KERNEL_RBF, SVGD_KERNEL_IMQ};
  const svgd_op_t ops[] = {SVGD_OP_MEDIAN, SVGD_OP_PHI, SVGD_OP_KSD};
  long long routes = 0;
  for (int a = 0; a < 4; ++a)
    for (int k = 0; k < 2; ++k)
      for (int o = 0; o < 2; ++o)
        for (long long dim = 1; dim <= 1100; ++dim)
          for (int p = 0; p < 3; ++p) {
            const svgd_route_overrides_t overrides = {o, o, o};
            const svgd_route_t r = svgd_route(ops[p], dim, kernels[k], archs[a], overrides);
            const int wgmma_device = a == 2 && !o; /* only 9.0 with sm_90a's code, no override */
            /* The row that applies: the first whose range, device and kernel match. */
            const row_t *row = NULL;
            for (size_t i = 0; i < sizeof table / sizeof table[0] && !row; ++i) {
              const row_t *t = &table[i];
              if (t->op != ops[p] || dim < t->lo || dim > t->hi) continue;
              if (t->needs_wgmma >= 0 && t->needs_wgmma != wgmma_device) continue;
              if (t->kernel >= 0 && t->kernel != kernels[k]) continue;
              row = t;
            }
            if (row) {
              check(r.family == row->family && r.agreement == row->agreement, "the table's row", dim, a, k, o);
            } else {
              /* KSD's "otherwise" row. */
              check(ops[p] == SVGD_OP_KSD && r.family == SVGD_FAMILY_DIRECT && r.agreement == SVGD_AGREE_FLOAT64_1E6,
                    "the KSD's direct row", dim, a, k, o);
            }
            check(r.family != SVGD_FAMILY_WGMMA_F16 || (a == 2 && dim >= 33 && dim <= 64), "wgmma only on 9.0 sm_90a",
                  dim, a, k, o);
            check((r.family != SVGD_FAMILY_MMA_F16 && r.family != SVGD_FAMILY_WGMMA_F16) || (dim >= 4 && dim <= 64),
                  "fp16 families only for 4..64 coordinates", dim, a, k, o);
            check((r.agreement == SVGD_AGREE_BITWISE_CPU) ==
                      (ops[p] == SVGD_OP_MEDIAN && (r.family == SVGD_FAMILY_DIRECT || r.family == SVGD_FAMILY_GEMM_DIRECT)),
                  "the CPU's bits exactly where the median uses the CPU's distance forms", dim, a, k, o);
            ++routes;
          }
  if (failures) {
    fprintf(stderr, "svgd_route: %d of %lld routes disagree with the table\n", failures, routes);
    return 1;
  }
  printf("svgd_route: %lld routes (d = 1..1100, 4 devices, 2 kernels, with and without overrides) as the table says\n",
         routes);
  return 0;
}
