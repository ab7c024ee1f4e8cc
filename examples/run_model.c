/* A C host of clusterjit: runs an ONNX test-data directory (model.onnx, test_data_set_N/input_K.pb and
 * output_K.pb) from several threads on one session, with zero-copy inputs (cjit_value_wrap over the host's
 * buffers) and bound outputs (results written into host buffers), and checks every output against the
 * reference (|out - ref| <= atol + rtol * |ref|, float32 outputs; other dtypes must be equal).
 *
 *   run_model_c MODEL_DIR [THREADS=4] [RUNS_PER_THREAD=20]      exit 0 when every output matches
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <clusterjit/clusterjit.h>

#include "tensor_pb.h"

#define MAX_SETS 16
#define MAX_IO 16

typedef struct data_set {
  int n_in, n_out;
  tensor_pb in[MAX_IO], ref[MAX_IO];
} data_set;

typedef struct shared {
  cjit_session* session;
  data_set* sets;
  int n_sets, runs;
  int failures;
  pthread_mutex_t mu;
} shared;

static int exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int check(const cjit_status* st, const char* what) {
  if (st == NULL) return 0;
  fprintf(stderr, "%s: %s\n", what, cjit_status_message(st));
  cjit_status_free((cjit_status*)st);
  return -1;
}

static int matches(const tensor_pb* ref, const void* got) {
  if (ref->data_type != CJIT_FLOAT32) return memcmp(ref->data, got, ref->bytes) == 0;
  const float* r = (const float*)ref->data;
  const float* g = (const float*)got;
  for (size_t i = 0; i < ref->bytes / 4; ++i) {
    if (isnan(r[i]) && isnan(g[i])) continue;
    if (!(fabsf(g[i] - r[i]) <= 1e-5f + 1e-3f * fabsf(r[i]))) return 0;
  }
  return 1;
}

static void* worker(void* arg) {
  shared* sh = (shared*)arg;
  int bad = 0;
  for (int run = 0; run < sh->runs; ++run) {
    data_set* ds = &sh->sets[run % sh->n_sets];
    const char* in_names[MAX_IO];
    cjit_value* in_values[MAX_IO] = {0};
    cjit_value* out_values[MAX_IO] = {0};
    void* out_buffers[MAX_IO] = {0};
    int ok = 1;
    for (int i = 0; i < ds->n_in && ok; ++i) {
      in_names[i] = ds->in[i].name;
      ok = check(cjit_value_wrap((cjit_dtype)ds->in[i].data_type, ds->in[i].dims, ds->in[i].rank, ds->in[i].data,
                                 ds->in[i].bytes, &in_values[i]), "wrap input") == 0;
    }
    for (int k = 0; k < ds->n_out && ok; ++k) {
      out_buffers[k] = malloc(ds->ref[k].bytes ? ds->ref[k].bytes : 1);
      ok = out_buffers[k] != NULL &&
           check(cjit_value_wrap((cjit_dtype)ds->ref[k].data_type, ds->ref[k].dims, ds->ref[k].rank, out_buffers[k],
                                 ds->ref[k].bytes, &out_values[k]), "wrap output") == 0;
    }
    if (ok) {
      ok = check(cjit_session_run(sh->session, in_names, (const cjit_value* const*)in_values, (size_t)ds->n_in, NULL,
                                  out_values, (size_t)ds->n_out), "run") == 0;
    }
    for (int k = 0; k < ds->n_out && ok; ++k) ok = matches(&ds->ref[k], out_buffers[k]);
    if (!ok) ++bad;
    for (int i = 0; i < ds->n_in; ++i) cjit_value_free(in_values[i]);
    for (int k = 0; k < ds->n_out; ++k) {
      cjit_value_free(out_values[k]);
      free(out_buffers[k]);
    }
  }
  pthread_mutex_lock(&sh->mu);
  sh->failures += bad;
  pthread_mutex_unlock(&sh->mu);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR [THREADS] [RUNS_PER_THREAD]\n", argv[0]);
    return 2;
  }
  int threads = argc > 2 ? atoi(argv[2]) : 4, runs = argc > 3 ? atoi(argv[3]) : 20;
  char path[4096];
  printf("clusterjit %s (header %d.%d.%d)\n", cjit_version(), CJIT_VERSION_MAJOR, CJIT_VERSION_MINOR, CJIT_VERSION_PATCH);
  cjit_options* opt = NULL;
  if (check(cjit_options_create(&opt), "options")) return 1;
  if (check(cjit_options_set(opt, "intra_op_threads", "1"), "options")) return 1;
  snprintf(path, sizeof path, "%s/model.onnx", argv[1]);
  cjit_session* session = NULL;
  if (check(cjit_session_create(path, opt, &session), "load")) return 1;
  cjit_options_free(opt);
  static data_set sets[MAX_SETS];
  int n_sets = 0;
  for (; n_sets < MAX_SETS; ++n_sets) {
    data_set* ds = &sets[n_sets];
    snprintf(path, sizeof path, "%s/test_data_set_%d", argv[1], n_sets);
    if (!exists(path)) break;
    for (ds->n_in = 0; ds->n_in < MAX_IO; ++ds->n_in) {
      snprintf(path, sizeof path, "%s/test_data_set_%d/input_%d.pb", argv[1], n_sets, ds->n_in);
      if (!exists(path)) break;
      if (tensor_pb_read(path, &ds->in[ds->n_in])) return 1;
      if (ds->in[ds->n_in].name[0] == 0) {
        strncpy(ds->in[ds->n_in].name, cjit_session_input_name(session, (size_t)ds->n_in), 255);
      }
    }
    for (ds->n_out = 0; ds->n_out < MAX_IO; ++ds->n_out) {
      snprintf(path, sizeof path, "%s/test_data_set_%d/output_%d.pb", argv[1], n_sets, ds->n_out);
      if (!exists(path)) break;
      if (tensor_pb_read(path, &ds->ref[ds->n_out])) return 1;
    }
  }
  if (n_sets == 0) {
    fprintf(stderr, "no test_data_set_* in %s\n", argv[1]);
    return 1;
  }
  shared sh = {session, sets, n_sets, runs, 0, PTHREAD_MUTEX_INITIALIZER};
  pthread_t* tids = (pthread_t*)calloc((size_t)threads, sizeof(pthread_t));
  for (int t = 0; t < threads; ++t) pthread_create(&tids[t], NULL, worker, &sh);
  for (int t = 0; t < threads; ++t) pthread_join(tids[t], NULL);
  free(tids);
  cjit_session_free(session);
  printf("%d threads x %d runs over %d data sets: %d wrong\n", threads, runs, n_sets, sh.failures);
  printf("%s\n", sh.failures ? "FAIL" : "PASS");
  return sh.failures ? 1 : 0;
}
