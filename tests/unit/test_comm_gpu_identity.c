/* test_comm_gpu_identity.c: the decision behind --comm auto|nccl, on synthetic GPU identities
 * (no GPU, no MPI): comm_gpus_distinct against a direct search over all pairs, and the keys
 * comm_select_transport compares: by UUID, by node and PCI address, and the fallback to the
 * PCI address when the driver gives no UUID. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

static int failures;

#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
      printf(__VA_ARGS__);                                       \
      printf("\n");                                              \
      failures++;                                                \
    }                                                            \
  } while (0)

typedef unsigned char gpu_key_t[COMM_GPU_KEY_BYTES];

/* The reference: the first equal pair in (a, b) order by looking at every pair. */
static int distinct_by_all_pairs(const gpu_key_t *keys, int size, int *first_a, int *first_b) {
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b)
      if (memcmp(keys[a], keys[b], COMM_GPU_KEY_BYTES) == 0) {
        *first_a = a;
        *first_b = b;
        return 0;
      }
  *first_a = *first_b = -1;
  return 1;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A UUID as the driver reports them: random bytes. */
static void random_uuid(uint64_t *state, unsigned char uuid[COMM_GPU_KEY_BYTES]) {
  uint64_t high = splitmix64(state), low = splitmix64(state);
  memcpy(uuid, &high, 8);
  memcpy(uuid + 8, &low, 8);
}

/* Returns the reference's verdict. */
static int check_against_reference(const char *what, const gpu_key_t *keys, int size) {
  int a = -2, b = -2, want_a = -2, want_b = -2;
  int got = comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, size, &a, &b);
  int want = distinct_by_all_pairs(keys, size, &want_a, &want_b);
  EXPECT(got == want && a == want_a && b == want_b, "%s (%d ranks): got %d (%d, %d), want %d (%d, %d)", what, size,
         got, a, b, want, want_a, want_b);
  return want;
}

static void test_hand_made(void) {
  gpu_key_t keys[6];
  uint64_t state = 1;
  for (int r = 0; r < 6; ++r) random_uuid(&state, keys[r]);
  int a = -2, b = -2;
  EXPECT(comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, 0, &a, &b) == 1 && a == -1 && b == -1,
         "no ranks: distinct, no pair (%d, %d)", a, b);
  EXPECT(comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, 1, &a, &b) == 1 && a == -1,
         "one rank: distinct");
  check_against_reference("six distinct GPUs", (const gpu_key_t *)keys, 6);
  EXPECT(comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, 6, &a, &b) == 1,
         "six distinct GPUs are distinct");

  /* Keys that differ in their last byte only are different GPUs. */
  memcpy(keys[4], keys[1], COMM_GPU_KEY_BYTES);
  keys[4][COMM_GPU_KEY_BYTES - 1] ^= 1;
  check_against_reference("last byte differs", (const gpu_key_t *)keys, 6);

  /* Ranks 3 and 5 on one GPU, then ranks 1 and 4 on another: the pair reported is (1, 4). */
  memcpy(keys[5], keys[3], COMM_GPU_KEY_BYTES);
  int got = comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, 6, &a, &b);
  EXPECT(got == 0 && a == 3 && b == 5, "ranks 3 and 5 share: got %d (%d, %d)", got, a, b);
  memcpy(keys[4], keys[1], COMM_GPU_KEY_BYTES);
  got = comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, 6, &a, &b);
  EXPECT(got == 0 && a == 1 && b == 4, "ranks 1 and 4 share as well: got %d (%d, %d)", got, a, b);

  /* Every rank on one GPU (many ranks under per-task binding gone wrong): (0, 1). */
  for (int r = 1; r < 6; ++r) memcpy(keys[r], keys[0], COMM_GPU_KEY_BYTES);
  got = comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, 6, &a, &b);
  EXPECT(got == 0 && a == 0 && b == 1, "all on one GPU: got %d (%d, %d)", got, a, b);
}

/* Seeded jobs of up to 600 ranks drawing their GPUs from a pool, against the direct search. */
static void test_random_jobs(void) {
  uint64_t state = 20261212;
  enum { MAX_RANKS = 600 };
  static gpu_key_t pool[2 * MAX_RANKS], keys[MAX_RANKS];
  int distinct_jobs = 0, shared_jobs = 0;
  for (int job = 0; job < 200; ++job) {
    const int size = 1 + (int)(splitmix64(&state) % MAX_RANKS);
    /* Even jobs take distinct GPUs from a pool at least as large as the job (a permutation's
     * prefix); odd jobs draw freely from pools of 1 up to twice the ranks, so mostly share. */
    const int distinct_draw = job % 2 == 0;
    const int pool_size = distinct_draw ? size + (int)(splitmix64(&state) % (uint64_t)(size + 1))
                                        : 1 + (int)(splitmix64(&state) % (uint64_t)(2 * size));
    for (int g = 0; g < pool_size; ++g) random_uuid(&state, pool[g]);
    for (int r = 0; r < size; ++r) {
      int g = r;
      if (distinct_draw) {
        const int swap_with = r + (int)(splitmix64(&state) % (uint64_t)(pool_size - r));
        gpu_key_t held;
        memcpy(held, pool[r], sizeof held);
        memcpy(pool[r], pool[swap_with], sizeof held);
        memcpy(pool[swap_with], held, sizeof held);
      } else {
        g = (int)(splitmix64(&state) % (uint64_t)pool_size);
      }
      memcpy(keys[r], pool[g], COMM_GPU_KEY_BYTES);
    }
    char what[64];
    snprintf(what, sizeof what, "random job %d", job);
    if (check_against_reference(what, (const gpu_key_t *)keys, size)) ++distinct_jobs; else ++shared_jobs;
  }
  /* The jobs must exercise both answers to test anything. */
  EXPECT(distinct_jobs >= 50 && shared_jobs >= 50, "random jobs: %d distinct, %d shared", distinct_jobs, shared_jobs);
}

static void test_keys(void) {
  comm_gpu_identity_t gpu_a, gpu_b;
  memset(&gpu_a, 0, sizeof gpu_a);
  memset(&gpu_b, 0, sizeof gpu_b);
  uint64_t state = 7;
  gpu_a.has_uuid = gpu_b.has_uuid = 1;
  random_uuid(&state, gpu_a.uuid);
  random_uuid(&state, gpu_b.uuid);
  gpu_a.pci_domain = gpu_b.pci_domain = 0;
  gpu_a.pci_bus = gpu_b.pci_bus = 0x3b;
  gpu_a.pci_device = gpu_b.pci_device = 0;
  gpu_key_t key_a, key_b;

  /* With a UUID the key is the UUID, whatever the node. */
  comm_gpu_key(&gpu_a, 0, key_a);
  EXPECT(memcmp(key_a, gpu_a.uuid, COMM_GPU_KEY_BYTES) == 0, "the UUID key is the UUID");
  comm_gpu_key(&gpu_a, 8, key_b);
  EXPECT(memcmp(key_a, key_b, COMM_GPU_KEY_BYTES) == 0, "one GPU seen from two node names: one UUID key");

  /* The PCI key: one address on one node is one GPU (MIG instances: distinct UUIDs, one
   * address); the same address on two nodes is two GPUs. */
  comm_gpu_pci_key(&gpu_a, 4, key_a);
  comm_gpu_pci_key(&gpu_b, 4, key_b);
  EXPECT(memcmp(key_a, key_b, COMM_GPU_KEY_BYTES) == 0, "one PCI address on one node: one PCI key");
  comm_gpu_pci_key(&gpu_b, 12, key_b);
  EXPECT(memcmp(key_a, key_b, COMM_GPU_KEY_BYTES) != 0, "one PCI address on two nodes: two PCI keys");
  comm_gpu_pci_key(&gpu_b, 4, key_b);
  gpu_key_t other;
  gpu_b.pci_bus = 0x5e;
  comm_gpu_pci_key(&gpu_b, 4, other);
  EXPECT(memcmp(key_b, other, COMM_GPU_KEY_BYTES) != 0, "two PCI buses on one node: two PCI keys");
  gpu_b.pci_bus = 0x3b;
  gpu_b.pci_domain = 1;
  comm_gpu_pci_key(&gpu_b, 4, other);
  EXPECT(memcmp(key_b, other, COMM_GPU_KEY_BYTES) != 0, "two PCI domains on one node: two PCI keys");
  gpu_b.pci_domain = 0;
  gpu_b.pci_device = 1;
  comm_gpu_pci_key(&gpu_b, 4, other);
  EXPECT(memcmp(key_b, other, COMM_GPU_KEY_BYTES) != 0, "two PCI devices on one node: two PCI keys");
  gpu_b.pci_device = 0;

  /* Without a UUID (zeros from the driver) the key falls back to the PCI key. */
  gpu_a.has_uuid = 0;
  memset(gpu_a.uuid, 0, sizeof gpu_a.uuid);
  comm_gpu_key(&gpu_a, 4, key_a);
  comm_gpu_pci_key(&gpu_a, 4, key_b);
  EXPECT(memcmp(key_a, key_b, COMM_GPU_KEY_BYTES) == 0, "no UUID: the key is the PCI key");
  EXPECT(memcmp(key_a, "pci:", 4) == 0, "the PCI key is marked");

  /* Three ranks on two nodes without UUIDs, two of them on one GPU of node 0. */
  gpu_key_t keys[3];
  comm_gpu_key(&gpu_a, 0, keys[0]);
  comm_gpu_key(&gpu_a, 2, keys[1]); /* the same address on node 2 */
  comm_gpu_key(&gpu_a, 0, keys[2]);
  int a = -2, b = -2;
  int got = comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])keys, 3, &a, &b);
  EXPECT(got == 0 && a == 0 && b == 2, "PCI fallback: ranks 0 and 2 share: got %d (%d, %d)", got, a, b);

  /* Names: the UUID's first four bytes as nvidia-smi shows them, or the PCI address. */
  char name[32];
  gpu_b.uuid[0] = 0x1a;
  gpu_b.uuid[1] = 0x2b;
  gpu_b.uuid[2] = 0x3c;
  gpu_b.uuid[3] = 0x4d;
  comm_gpu_name(&gpu_b, name, sizeof name);
  EXPECT(strcmp(name, "GPU-1a2b3c4d") == 0, "UUID name: %s", name);
  comm_gpu_name(&gpu_a, name, sizeof name);
  EXPECT(strcmp(name, "PCI 0000:3b:00") == 0, "PCI name: %s", name);
}

int main(void) {
  test_hand_made();
  test_random_jobs();
  test_keys();
  printf("%s\n", failures ? "comm_gpu_identity: FAILED" : "comm_gpu_identity: all checks passed");
  return failures ? 1 : 0;
}
