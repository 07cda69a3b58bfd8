/* The C API from C: build over a Gaussian mixture, search, check the result
   against brute force, save, load, search again, the refusals (status
   codes and messages), and adds, removes and searches by user id. Exits 0 when every check holds; prints a summary
   line. `cargo test` compiles it (build.rs, with -Wall -Wextra -Werror) and
   calls octex_c_test_main from tests/c_program.rs; define
   OCTEX_C_TEST_STANDALONE for a program of its own: test_octex TMPDIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "octex.h"

static int failed = 0, passed = 0;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) {                                            \
      passed++;                                            \
    } else {                                               \
      failed++;                                            \
      fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, " (last error: %s)\n", octex_last_error()); \
    }                                                      \
  } while (0)

static DLTensor matrix(void* data, int64_t* shape, uint8_t code) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 2;
  t.dtype.code = code;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static unsigned rng = 12345u;
static float gauss(void) {
  float u = 0;
  for (int i = 0; i < 12; i++) {
    rng = rng * 1664525u + 1013904223u;
    u += (float)(rng >> 8) / 16777216.0f;
  }
  return u - 6.0f;
}

enum { N = 3000, NQ = 50, DIM = 16, K = 10 };

int octex_c_test_main(int argc, char** argv);

int octex_c_test_main(int argc, char** argv) {
  const char* dir = argc > 1 ? argv[1] : ".";
  static float base[N * DIM], queries[NQ * DIM], centres[8 * DIM];
  for (int i = 0; i < 8 * DIM; i++) centres[i] = 3.0f * gauss() / (1.0f + (i % DIM) / 6.0f);
  for (int i = 0; i < N + NQ; i++) {
    float* row = i < N ? &base[i * DIM] : &queries[(i - N) * DIM];
    int c = i % 8;
    for (int j = 0; j < DIM; j++) row[j] = centres[c * DIM + j] + gauss() / (1.0f + j / 6.0f);
  }
  int64_t bshape[2] = {N, DIM}, qshape[2] = {NQ, DIM}, oshape[2] = {NQ, K};
  DLTensor tb = matrix(base, bshape, kDLFloat), tq = matrix(queries, qshape, kDLFloat);
  static uint32_t ids[NQ * K];
  static float dist[NQ * K];
  DLTensor ti = matrix(ids, oshape, kDLUInt), td = matrix(dist, oshape, kDLFloat);

  OctexIndex* index = NULL;
  CHECK(octex_build(&tb, "l2", "cpu", &index) == OCTEX_STATUS_OK, "build");
  CHECK(octex_len(index) == N && octex_dim(index) == DIM, "len %zu dim %zu", octex_len(index), octex_dim(index));
  OctexSearchParams p = octex_search_params_default();
  p.rerank = 64;
  CHECK(octex_search(index, &tq, K, &p, "cpu", &ti, &td) == OCTEX_STATUS_OK, "search");

  /* Recall@10 against brute force. */
  int hits = 0;
  for (int q = 0; q < NQ; q++) {
    float best[K];
    for (int j = 0; j < K; j++) best[j] = INFINITY;
    for (int i = 0; i < N; i++) {
      float d = 0;
      for (int j = 0; j < DIM; j++) {
        float e = queries[q * DIM + j] - base[i * DIM + j];
        d += e * e;
      }
      if (d < best[K - 1]) {
        int at = K - 1;
        while (at > 0 && best[at - 1] > d) { best[at] = best[at - 1]; at--; }
        best[at] = d;
      }
    }
    for (int j = 0; j < K; j++) hits += dist[q * K + j] <= best[K - 1] * 1.002f + 1e-6f;
  }
  double recall = (double)hits / (NQ * K);
  CHECK(recall >= 0.9, "recall@10 %.3f", recall);

  char path[4096];
  snprintf(path, sizeof path, "%s/c_api.octex", dir);
  CHECK(octex_save(index, path) == OCTEX_STATUS_OK, "save");
  OctexIndex* again = NULL;
  CHECK(octex_load(path, &again) == OCTEX_STATUS_OK, "load");
  static uint32_t ids2[NQ * K];
  DLTensor ti2 = matrix(ids2, oshape, kDLUInt);
  CHECK(octex_search(again, &tq, K, &p, NULL, &ti2, &td) == OCTEX_STATUS_OK, "search after load");
  CHECK(memcmp(ids, ids2, sizeof ids) == 0, "same ids after the round trip");

  /* Null parameters: the index's own defaults, chosen by its build. */
  OctexSearchParams index_defaults;
  CHECK(octex_default_params(again, &index_defaults) == OCTEX_STATUS_OK, "default params");
  CHECK(index_defaults.start_points >= 1 && index_defaults.waves >= 1 && index_defaults.rerank >= 1, "defaults S %zu W %zu R %zu",
        index_defaults.start_points, index_defaults.waves, index_defaults.rerank);
  CHECK(octex_search(again, &tq, K, &index_defaults, NULL, &ti, &td) == OCTEX_STATUS_OK, "search at the defaults");
  CHECK(octex_search(again, &tq, K, NULL, NULL, &ti2, &td) == OCTEX_STATUS_OK, "search, null params");
  CHECK(memcmp(ids, ids2, sizeof ids) == 0, "null parameters are the index's defaults");
  CHECK(octex_default_params(NULL, &index_defaults) == OCTEX_STATUS_INVALID_ARGUMENT, "null index");

  /* Refusals: status codes and messages. */
  int64_t wrong[2] = {NQ, DIM - 1};
  DLTensor tw = matrix(queries, wrong, kDLFloat);
  CHECK(octex_search(index, &tw, K, NULL, NULL, &ti, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "wrong dim");
  CHECK(strstr(octex_last_error(), "dimension") != NULL, "message: %s", octex_last_error());
  CHECK(octex_search(index, &tq, N + 1, NULL, NULL, &ti, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "k > n");
  float saved = queries[5];
  queries[5] = NAN;
  CHECK(octex_search(index, &tq, K, NULL, NULL, &ti, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "NaN");
  queries[5] = saved;
  DLTensor tu = matrix(queries, qshape, kDLUInt);
  CHECK(octex_search(index, &tu, K, NULL, NULL, &ti, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "dtype");
  int64_t small[2] = {NQ, K - 1};
  DLTensor ts = matrix(ids, small, kDLUInt);
  CHECK(octex_search(index, &tq, K, NULL, NULL, &ts, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "output shape");
  CHECK(octex_search(index, &tq, K, NULL, "tpu", &ti, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "backend name");
  if (!octex_gpu_available())
    CHECK(octex_search(index, &tq, K, NULL, "gpu", &ti, &td) == OCTEX_STATUS_GPU, "gpu without a device");
  else
    CHECK(octex_search(index, &tq, K, NULL, "gpu", &ti, &td) == OCTEX_STATUS_OK, "gpu search");
  CHECK(octex_build(&tb, "hamming", NULL, &again) == OCTEX_STATUS_INVALID_ARGUMENT, "metric name");
  CHECK(octex_search(NULL, &tq, K, NULL, NULL, &ti, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "null index");
  OctexIndex* none = NULL;
  snprintf(path, sizeof path, "%s/missing.octex", dir);
  CHECK(octex_load(path, &none) == OCTEX_STATUS_IO && none == NULL, "missing file");
  CHECK(octex_search_params_default().waves == 3, "defaults");

  /* Adds, removes and user ids: the queries join the index as vectors. */
  uint64_t new_ids[NQ], got[NQ];
  for (int i = 0; i < NQ; i++) new_ids[i] = 1000000u + (uint64_t)i;
  CHECK(octex_add(index, &tq, new_ids, got) == OCTEX_STATUS_OK, "add");
  CHECK(got[NQ - 1] == new_ids[NQ - 1], "ids kept");
  CHECK(octex_len(index) == N + NQ, "len after add %zu", octex_len(index));
  CHECK(octex_add(index, &tq, new_ids, NULL) == OCTEX_STATUS_INVALID_ARGUMENT, "duplicate ids");
  CHECK(strstr(octex_last_error(), "already") != NULL, "message: %s", octex_last_error());
  CHECK(octex_len(index) == N + NQ, "a refused add adds nothing");
  static uint64_t uids[NQ * K];
  CHECK(octex_search_ids(index, &tq, K, NULL, NULL, 0, uids, dist) == OCTEX_STATUS_OK, "search by id");
  int self = 0;
  for (int i = 0; i < NQ; i++) self += uids[i * K] == new_ids[i];
  CHECK(self >= NQ - NQ / 20, "%d of %d added vectors found themselves", self, NQ);
  size_t removed = 0;
  CHECK(octex_remove(index, new_ids, NQ, &removed) == OCTEX_STATUS_OK && removed == NQ, "remove");
  CHECK(octex_len(index) == N, "len after remove");
  CHECK(octex_search_ids(index, &tq, K, NULL, NULL, 0, uids, dist) == OCTEX_STATUS_OK, "search after remove");
  int back = 0;
  for (int i = 0; i < NQ * K; i++) back += uids[i] >= 1000000u && uids[i] != UINT64_MAX;
  CHECK(back == 0, "%d removed ids came back", back);
  uint64_t allow[3] = {1, 2, 3};
  CHECK(octex_search_ids(index, &tq, K, NULL, allow, 3, uids, dist) == OCTEX_STATUS_OK, "filtered");
  int outside = 0;
  for (int i = 0; i < NQ * K; i++) outside += uids[i] != UINT64_MAX && (uids[i] < 1 || uids[i] > 3);
  CHECK(outside == 0 && uids[3] == UINT64_MAX, "only allowed ids, padded");
  CHECK(octex_search(index, &tq, K, NULL, NULL, &ti, &td) == OCTEX_STATUS_INVALID_ARGUMENT, "positions after a remove");
  /* A bitset filter (cuVS's layout): ids 64..95 only. */
  uint32_t words[3] = {0, 0, 0xFFFFFFFFu};
  int64_t nwords[1] = {3};
  DLTensor tbits = matrix(words, nwords, kDLUInt);
  tbits.ndim = 1;
  CHECK(octex_search_bitset(index, &tq, K, NULL, &tbits, uids, dist) == OCTEX_STATUS_OK, "bitset: %s", octex_last_error());
  int outside_bits = 0;
  for (int i = 0; i < NQ * K; i++) outside_bits += uids[i] < 64 || uids[i] > 95;
  CHECK(outside_bits == 0, "%d results outside the bitset", outside_bits);
  CHECK(octex_search_bitset(index, &tq, K, NULL, &tq, uids, dist) == OCTEX_STATUS_INVALID_ARGUMENT, "a float matrix is no bitset");
  /* One vector with an id of its own; saved with ids and removals, loaded
     back to the same answers. */
  int64_t one[2] = {1, DIM};
  DLTensor t1 = matrix(queries, one, kDLFloat);
  uint64_t own = 5000000u;
  CHECK(octex_add(index, &t1, &own, NULL) == OCTEX_STATUS_OK, "add one");
  snprintf(path, sizeof path, "%s/live.octex", dir);
  CHECK(octex_save(index, path) == OCTEX_STATUS_OK, "save a changed index: %s", octex_last_error());
  OctexIndex* reloaded = NULL;
  CHECK(octex_load(path, &reloaded) == OCTEX_STATUS_OK, "load a changed index: %s", octex_last_error());
  CHECK(octex_len(reloaded) == octex_len(index), "len after load");
  static uint64_t uids2[NQ * K];
  static float dist2[NQ * K];
  CHECK(octex_search_ids(index, &tq, K, NULL, NULL, 0, uids, dist) == OCTEX_STATUS_OK, "search saved");
  CHECK(octex_search_ids(reloaded, &tq, K, NULL, NULL, 0, uids2, dist2) == OCTEX_STATUS_OK, "search loaded");
  CHECK(memcmp(uids, uids2, sizeof uids) == 0 && memcmp(dist, dist2, sizeof dist) == 0, "same answers after load");
  CHECK(uids[0] == own, "the own id comes back: %llu", (unsigned long long)uids[0]);
  octex_free(reloaded);

  /* Two shards' answers merged: ids 7 (0.1), 3 (0.2), 9 (0.5); one missing. */
  const uint64_t a_ids[2] = {3, 9}, b_ids[2] = {7, UINT64_MAX};
  const float a_d[2] = {0.2f, 0.5f}, b_d[2] = {0.1f, INFINITY};
  const uint64_t* part_ids[2] = {a_ids, b_ids};
  const float* part_d[2] = {a_d, b_d};
  size_t part_k[2] = {2, 2};
  uint64_t m_ids[4];
  float m_d[4];
  CHECK(octex_merge_topk(part_ids, part_d, part_k, 2, 1, 4, 0, m_ids, m_d) == OCTEX_STATUS_OK, "merge");
  CHECK(m_ids[0] == 7 && m_ids[1] == 3 && m_ids[2] == 9 && m_ids[3] == UINT64_MAX, "merged order");
  CHECK(octex_merge_topk(NULL, part_d, part_k, 2, 1, 4, 0, m_ids, m_d) == OCTEX_STATUS_INVALID_ARGUMENT, "null merge");

  octex_free(index);
  octex_free(again);
  octex_free(NULL);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}

#ifdef OCTEX_C_TEST_STANDALONE
int main(int argc, char** argv) { return octex_c_test_main(argc, argv); }
#endif
