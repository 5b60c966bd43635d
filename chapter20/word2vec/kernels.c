/* word2vec's SGD loop, one (input, output) pair at a time: the fast path of chapter20.word2vec.skipgram.
 *
 * The note on efficient embedding training, topic 1. SkipGram.step (the plain path, PyTorch)
 * computes a batch of pairs op by op; this file applies the same update to one pair after
 * another, as word2vec's C code and gensim's Cython do. A pair touches 1 + k rows of 100
 * floats (negative sampling) or one row per inner node on a path (hierarchical softmax): they
 * stay in the first-level cache from the first dot product to the last update, where the plain
 * path streams megabyte temporaries through memory several times per batch.
 *
 * For each pair, update_pair does what SkipGram.step does for a batch of that one pair
 * (tests/test_word2vec_fused.py checks it, to float32 rounding, over hundreds of pairs in a row):
 *
 *   scores    f_j = u_j . h            h: the input word's row of w_in; u_j: rows of w_out
 *   loss      -log sigmoid(f_j) for label 1 (the true word, a left branch), -log sigmoid(-f_j)
 *             for label 0 (a noise word, a right branch)
 *   steps     s_j = -lr (sigmoid(f_j) - label_j), all from the rows as they were
 *   step cap  each row's step divided by max(1, lr * sum of sigmoid'(f) |x|^2), x the vector
 *             it is multiplied with (see SkipGram; for a single pair it almost never binds)
 *   update    u_j += s_j cap_j h;  h += cap_h sum_j s_j u_j
 *
 * Hogwild: the Python trainer calls these from several threads on the same tables without
 * locks (ctypes releases Python's lock during the call), as gensim's workers do.
 *
 * Built by chapter20/word2vec/fused.py with the machine's C compiler, once per process.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* The simd pragma lets the compiler split a sum into vector lanes (a fixed order, so results
 * are the same on every run); without it the loop adds one product at a time. */
static inline float dot(const float *a, const float *b, int64_t n) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* u . h and u . u in one pass over u. */
static inline float dot_and_norm(const float *u, const float *h, int64_t n, float *u_sq) {
    float sum = 0.0f, sq = 0.0f;
#pragma omp simd reduction(+ : sum, sq)
    for (int64_t i = 0; i < n; i++) {
        sum += u[i] * h[i];
        sq += u[i] * u[i];
    }
    *u_sq = sq;
    return sum;
}

/* Ask for every cache line of a row at once: a pair's rows are scattered over tables of
 * megabytes, and requested together their waits overlap instead of adding up. Every row asked
 * for is written by the same pair, so it is asked for with the intent to write: a line fetched
 * only for reading must be fetched again, exclusively, to be written — a second trip to the
 * other core whenever Hogwild threads share it, as they share the rows at the top of the
 * Huffman tree, which every pair of every thread writes. */
static inline void prefetch_row(const float *row, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(row + i, 1);
}

static inline float row_cap(float lr, float curvature) {
    float total = lr * curvature;
    return total > 1.0f ? 1.0f / total : 1.0f;
}

/* A pair's loss costs one logarithm, not one per score: -log sigmoid(f) = log(1 + e) with
 * e = exp(-f), and -log sigmoid(-f) = log(1 + e) + f, so the loss is log(prod_j (1 + e_j))
 * plus the f_j of the 0 labels. The product is kept in double (a pair would need scores below
 * -100 to overflow it); a score so negative that e overflows a float adds -f instead, its
 * -log sigmoid to float precision. */
typedef struct {
    double product, sum;
} Loss;

static inline void loss_add(Loss *loss, float f, float e, float label) {
    if (isinf(e))
        loss->sum -= f;
    else
        loss->product *= 1.0 + (double)e;
    if (label == 0.0f) loss->sum += f;
}

/* What one pair's update needs besides the tables, allocated once per call. */
typedef struct {
    float **rows;  /* the pair's output rows */
    float *label, *weight, *neu1e;
} Scratch;

static Scratch scratch_new(int64_t max_rows, int64_t dim) {
    Scratch s;
    s.rows = malloc(sizeof(float *) * max_rows);
    s.label = malloc(sizeof(float) * (2 * max_rows + dim));
    s.weight = s.label + max_rows, s.neu1e = s.weight + max_rows;
    return s;
}

static void scratch_free(Scratch *s) {
    free(s->rows);
    free(s->label);
}

/* One pair's SGD step on its input row h and its m distinct output rows s->rows, with labels
 * s->label and multiplicities s->weight (a noise word drawn twice is one row of weight 2: the
 * batched step adds both of its steps, computed from the same row). A step whose score is
 * beyond +-max_exp is skipped; its loss still counts, as in the batched step. Returns the
 * pair's loss.
 *
 * One pass over the output rows, in word2vec's own order: each row is scored against h and
 * updated at once, while it is in the first-level cache, and before a Hogwild thread takes it
 * back. The result is the batched step's: the rows are distinct, so a row's update reads only
 * itself and h, which changes last; h's step is summed from the rows as they were and capped by
 * the curvature summed over all of them. */
static double update_pair(float *h, Scratch *s, int64_t m, int64_t dim, float max_exp,
                          float lr) {
    float h_sq = dot(h, h, dim), in_curvature = 0.0f, *neu1e = s->neu1e;
    Loss loss = {1.0, 0.0};
    for (int64_t i = 0; i < dim; i++) neu1e[i] = 0.0f;
    for (int64_t j = 0; j < m; j++) {
        float *u = s->rows[j], u_sq;
        float f = dot_and_norm(u, h, dim, &u_sq);
        float e = expf(-f), sig = 1.0f / (1.0f + e), w = s->weight[j];
        for (float c = 0.0f; c < w; c += 1.0f) loss_add(&loss, f, e, s->label[j]);
        if (!(fabsf(f) < max_exp)) continue;  /* saturated: skipped */
        float step = -lr * (sig - s->label[j]) * w, curvature = sig * (1.0f - sig) * w;
        in_curvature += curvature * u_sq;
        if (step == 0.0f) continue;
        float out_step = step * row_cap(lr, curvature * h_sq);
#pragma omp simd
        for (int64_t i = 0; i < dim; i++) {
            neu1e[i] += step * u[i];  /* the row as it was, then its own update */
            u[i] += out_step * h[i];
        }
    }
    float in_cap = row_cap(lr, in_curvature);
#pragma omp simd
    for (int64_t i = 0; i < dim; i++) h[i] += in_cap * neu1e[i];
    return log(loss.product) + loss.sum;
}

/* SplitMix64 (Steele, Lea and Flood 2014): a tiny, fast generator; one stream per call. */
static inline uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One noise word by Walker's alias method, as chapter20.word2vec.sampling.NoiseSampler draws it: a
 * uniform slot, then a uniform number in [0, 1) against the slot's probability. */
static inline int64_t draw_one(const double *prob, const int64_t *alias, int64_t size,
                               uint64_t *state) {
    int64_t slot = (int64_t)(((unsigned __int128)next_random(state) * (uint64_t)size) >> 64);
    double coin = (double)(next_random(state) >> 11) * 0x1.0p-53;
    return coin < prob[slot] ? slot : alias[slot];
}

/* count noise words into out: the stream negative_pairs draws for the same seed. */
void draw_noise(const double *prob, const int64_t *alias, int64_t size, uint64_t seed,
                int64_t *out, int64_t count) {
    for (int64_t i = 0; i < count; i++) out[i] = draw_one(prob, alias, size, &seed);
}

/* Negative sampling on n pairs (inputs[p], outputs[p]), k noise words per pair drawn from the
 * alias tables (prob, alias) with the stream of seed; a noise word equal to the true word is
 * left out, as in word2vec. Returns the pairs' summed loss. */
double negative_pairs(float *w_in, float *w_out, int64_t dim, const int64_t *inputs,
                      const int64_t *outputs, int64_t n, int64_t k, const double *prob,
                      const int64_t *alias, int64_t size, uint64_t seed, float lr) {
    Scratch s = scratch_new(k + 1, dim);
    int64_t *ids = malloc(sizeof(int64_t) * (k + 1));
    double loss = 0.0;
    for (int64_t p = 0; p < n; p++) {
        int64_t m = 1;
        ids[0] = outputs[p], s.label[0] = 1.0f, s.weight[0] = 1.0f;
        for (int64_t j = 0; j < k; j++) {
            int64_t word = draw_one(prob, alias, size, &seed), at = 0;
            while (at < m && ids[at] != word) at++;
            if (at == 0) continue;  /* the true word */
            if (at == m) ids[m] = word, s.label[m] = 0.0f, s.weight[m++] = 0.0f;
            s.weight[at] += 1.0f;
        }
        for (int64_t j = 0; j < m; j++) {
            s.rows[j] = w_out + ids[j] * dim;
            prefetch_row(s.rows[j], dim);
        }
        if (p + 1 < n) prefetch_row(w_in + inputs[p + 1] * dim, dim);
        loss += update_pair(w_in + inputs[p] * dim, &s, m, dim, INFINITY, lr);
    }
    scratch_free(&s);
    free(ids);
    return loss;
}

/* The hierarchical softmax on n pairs: the output word o's path is points[o * depth + l] for
 * l < lengths[o] (a path never visits a node twice), with labels[o * depth + l] = 1 - code.
 * Steps beyond +-max_exp are skipped, as in word2vec and gensim. Returns the summed loss. */
double hierarchical_pairs(float *w_in, float *w_out, int64_t dim, const int64_t *inputs,
                          const int64_t *outputs, int64_t n, const int64_t *points,
                          const float *labels, const int64_t *lengths, int64_t depth,
                          float max_exp, float lr) {
    Scratch s = scratch_new(depth > 0 ? depth : 1, dim);
    for (int64_t l = 0; l < depth; l++) s.weight[l] = 1.0f;
    double loss = 0.0;
    int64_t m = 0;
    for (int64_t p = 0; p < n; p++) {
        /* Pairs come grouped by output word (each word predicted from its whole window): the
         * same path, already set up and in the cache, for several pairs in a row. */
        if (p == 0 || outputs[p] != outputs[p - 1]) {
            const int64_t *path = points + outputs[p] * depth;
            m = lengths[outputs[p]];
            for (int64_t l = 0; l < m; l++) {
                s.rows[l] = w_out + path[l] * dim;
                s.label[l] = labels[outputs[p] * depth + l];
                prefetch_row(s.rows[l], dim);
            }
        }
        if (p + 1 < n) prefetch_row(w_in + inputs[p + 1] * dim, dim);
        loss += update_pair(w_in + inputs[p] * dim, &s, m, dim, max_exp, lr);
    }
    scratch_free(&s);
    return loss;
}
