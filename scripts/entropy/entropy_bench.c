/* The entropy stage alone (issue #38, "measure first"): libjpeg-turbo's decode of a JPEG's
 * quantised DCT coefficients (stokehold's patched build: jpeg_read_coefficients, Huffman decoding
 * into coefficient blocks, no IDCT) against a prototype coding of the *same* coefficients built
 * for decoding speed, on one core.
 *
 * The prototype keeps JPEG's symbol alphabet (DC size categories; AC run/size with ZRL and EOB,
 * in zig-zag order, DC predicted from the previous block of the component) but separates what
 * JPEG interleaves in one serial bit stream:
 *   - the symbols are coded with rANS, 4 states interleaved (symbol i goes to state i % 4), so
 *     consecutive symbols do not wait for each other; static frequencies per image for 4
 *     contexts (luma DC/AC, chroma DC/AC), 11-bit precision, one 32-bit table entry per slot
 *     (32 KiB for the 4 tables);
 *   - the value bits of each coefficient are a separate plain bit stream, read 64 bits at a time.
 * Blocks are stored component by component, row by row (a crop could start at any block row).
 *
 * Every image's prototype decode is compared with libjpeg-turbo's coefficients before it is
 * timed. Usage: entropy_bench DIR [N] [ROUNDS]  (DIR: JPEG files; N: how many, default all).
 * Prints per-image medians of ROUNDS (default 5) alternated passes over the images.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpeglib.h>

#define PROB_BITS 11
#define PROB_SCALE (1u << PROB_BITS)
#define RANS_L (1u << 16)

static const int ZZ[64] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                           12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                           35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                           58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- libjpeg-turbo: the coefficients ------------------------------------------------------ */

struct err {
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
};
static void on_error(j_common_ptr c) { longjmp(((struct err *)c->err)->jump, 1); }

typedef struct {
  int ncomp;
  int wb[4], hb[4]; /* blocks per row and rows of blocks, per component */
  int16_t *coef[4]; /* wb * hb blocks of 64, natural order */
} Coefs;

/* Decode `data`'s coefficients with libjpeg-turbo into `out` (when not NULL). 0 on success. */
static int jpeg_coefs(const unsigned char *data, size_t len, Coefs *out, int header_only) {
  struct jpeg_decompress_struct d;
  struct err e;
  d.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = on_error;
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&d);
    return -1;
  }
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, data, len);
  jpeg_read_header(&d, TRUE);
  if (header_only || d.progressive_mode) {
    int p = d.progressive_mode;
    jpeg_destroy_decompress(&d);
    return p ? -1 : 0;
  }
  jvirt_barray_ptr *arr = jpeg_read_coefficients(&d);
  if (out) {
    out->ncomp = d.num_components;
    for (int c = 0; c < d.num_components && c < 4; c++) {
      jpeg_component_info *ci = &d.comp_info[c];
      int wb = ci->width_in_blocks, hb = ci->height_in_blocks;
      out->wb[c] = wb;
      out->hb[c] = hb;
      out->coef[c] = malloc((size_t)wb * hb * 64 * sizeof(int16_t));
      for (int y = 0; y < hb; y++) {
        JBLOCKARRAY row = (*d.mem->access_virt_barray)((j_common_ptr)&d, arr[c], y, 1, FALSE);
        memcpy(out->coef[c] + (size_t)y * wb * 64, row[0], (size_t)wb * 64 * sizeof(int16_t));
      }
    }
  }
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  return 0;
}

/* ---- the prototype ------------------------------------------------------------------------ */

/* One alphabet per component class (luma, chroma). AC: 0 EOB, 1 ZRL (16 zeros), then for each
 * run r of zeros (0..15) a value of -2, -1, 1 or 2 coded in the symbol itself (2 + 4r + i: most
 * of a photograph's AC coefficients, which then need no value bits), and for larger values the
 * run and the size s (2..10) with s value bits (66 + 9r + s - 2). DC: size s as 256 + s with s
 * value bits. */
#define NSYM 272
#define MAXC 4

typedef struct {
  uint32_t dec[2][PROB_SCALE]; /* freq << 20 | bias << 9 | sym */
  uint16_t freq[2][NSYM], cum[2][NSYM];
  uint16_t *words[MAXC]; /* each component's rANS words (the decoder reads forward) */
  size_t nwords[MAXC];
  uint32_t init[MAXC][4];
  size_t nsym[MAXC];
  uint64_t *bits; /* value bits, MSB first, 64 per word */
  size_t nbits_words;
  size_t total_sym;
  uint16_t *symbuf; /* the decoder's scratch: one component's symbols */
} Coded;

static int nbits(int v) {
  int a = v < 0 ? -v : v, n = 0;
  while (a) {
    n++;
    a >>= 1;
  }
  return n;
}

/* Normalise counts to PROB_SCALE, every present symbol at least 1. */
static void normalise(const uint32_t *count, uint16_t *freq) {
  uint64_t total = 0;
  for (int s = 0; s < NSYM; s++) total += count[s];
  memset(freq, 0, NSYM * sizeof(uint16_t));
  if (!total) {
    freq[0] = PROB_SCALE;
    return;
  }
  int sum = 0, best = 0;
  for (int s = 0; s < NSYM; s++) {
    freq[s] = count[s] ? (uint16_t)(count[s] * (uint64_t)PROB_SCALE / total) : 0;
    if (count[s] && !freq[s]) freq[s] = 1;
    sum += freq[s];
    if (freq[s] > freq[best]) best = s;
  }
  while (sum > (int)PROB_SCALE) {
    for (int t = 0; t < NSYM && sum > (int)PROB_SCALE; t++)
      if (freq[t] > 1 && freq[t] >= freq[best] / 2) {
        freq[t]--;
        sum--;
      }
  }
  freq[best] += PROB_SCALE - sum;
}

static void put_bits(uint64_t **w, int *used, uint64_t *acc, uint32_t v, int n) {
  if (!n) return;
  if (*used + n <= 64) {
    *acc = n == 64 ? v : (*acc << n) | v;
    *used += n;
    if (*used == 64) {
      *(*w)++ = *acc;
      *acc = 0;
      *used = 0;
    }
  } else {
    int first = 64 - *used, rest = n - first;
    *acc = (*acc << first) | (v >> rest);
    *(*w)++ = *acc;
    *acc = v & ((1u << rest) - 1);
    *used = rest;
  }
}

static void encode(const Coefs *c, Coded *out) {
  size_t blocks = 0;
  for (int k = 0; k < c->ncomp; k++) blocks += (size_t)c->wb[k] * c->hb[k];
  uint16_t *syms = malloc(blocks * 65 * sizeof(uint16_t));
  size_t start[MAXC + 1];
  uint64_t *bits = calloc(blocks * 16 + 16, sizeof(uint64_t));
  uint64_t *bw = bits, acc = 0;
  int used = 0;
  size_t n = 0;
  uint32_t count[2][NSYM];
  memset(count, 0, sizeof count);
  for (int k = 0; k < c->ncomp; k++) {
    int cx = k ? 1 : 0, pred = 0;
    start[k] = n;
    size_t nb = (size_t)c->wb[k] * c->hb[k];
    for (size_t b = 0; b < nb; b++) {
      const int16_t *blk = c->coef[k] + b * 64;
      int diff = blk[0] - pred, s = nbits(diff);
      pred = blk[0];
      syms[n++] = (uint16_t)(256 + s);
      count[cx][256 + s]++;
      put_bits(&bw, &used, &acc, diff < 0 ? (uint32_t)(diff + (1 << s) - 1) : (uint32_t)diff, s);
      int last = 0;
      for (int i = 63; i > 0; i--)
        if (blk[ZZ[i]]) {
          last = i;
          break;
        }
      int run = 0;
      for (int i = 1; i <= last; i++) {
        int v = blk[ZZ[i]];
        if (!v) {
          run++;
          continue;
        }
        while (run > 15) {
          syms[n++] = 1;
          count[cx][1]++;
          run -= 16;
        }
        int sz = nbits(v);
        uint16_t sym;
        if (v >= -2 && v <= 2) {
          sym = (uint16_t)(2 + 4 * run + (v == -2 ? 0 : v == -1 ? 1 : v == 1 ? 2 : 3));
        } else {
          sym = (uint16_t)(66 + 9 * run + sz - 2);
          put_bits(&bw, &used, &acc, v < 0 ? (uint32_t)(v + (1 << sz) - 1) : (uint32_t)v, sz);
        }
        syms[n++] = sym;
        count[cx][sym]++;
        run = 0;
      }
      if (last < 63) {
        syms[n++] = 0;
        count[cx][0]++;
      }
    }
  }
  start[c->ncomp] = n;
  if (used) *bw++ = acc << (64 - used);
  *bw++ = 0; /* the decoder reads one word ahead */
  *bw++ = 0;
  out->bits = bits;
  out->nbits_words = bw - bits;
  out->total_sym = n;
  for (int x = 0; x < 2; x++) {
    normalise(count[x], out->freq[x]);
    uint16_t cum = 0;
    for (int s = 0; s < NSYM; s++) {
      out->cum[x][s] = cum;
      for (int j = 0; j < out->freq[x][s]; j++)
        out->dec[x][cum + j] = (uint32_t)out->freq[x][s] << 20 | (uint32_t)j << 9 | (uint32_t)s;
      cum += out->freq[x][s];
    }
  }
  /* rANS per component, 4 states interleaved (symbol i to state i % 4), encoded backwards */
  size_t most = 0;
  for (int k = 0; k < c->ncomp; k++) {
    int cx = k ? 1 : 0;
    size_t m = start[k + 1] - start[k];
    most = m > most ? m : most;
    size_t cap = m * 2 + 16;
    uint16_t *buf = malloc(cap * sizeof(uint16_t)), *ptr = buf + cap;
    uint32_t st[4] = {RANS_L, RANS_L, RANS_L, RANS_L};
    for (size_t i = m; i-- > 0;) {
      uint32_t *x = &st[i & 3];
      uint16_t sym = syms[start[k] + i];
      uint32_t f = out->freq[cx][sym], cu = out->cum[cx][sym];
      uint64_t xmax = (uint64_t)((RANS_L >> PROB_BITS) << 16) * f;
      while (*x >= xmax) {
        *--ptr = (uint16_t)*x;
        *x >>= 16;
      }
      *x = ((*x / f) << PROB_BITS) + (*x % f) + cu;
    }
    memcpy(out->init[k], st, sizeof st);
    out->nsym[k] = m;
    out->nwords[k] = buf + cap - ptr;
    out->words[k] = malloc((out->nwords[k] + 8) * sizeof(uint16_t));
    memcpy(out->words[k], ptr, out->nwords[k] * sizeof(uint16_t));
    memset(out->words[k] + out->nwords[k], 0, 8 * sizeof(uint16_t));
    free(buf);
  }
  out->symbuf = malloc((most + 8) * sizeof(uint16_t));
  free(syms);
}

/* What an AC symbol does, branch-free: skip `skip` positions, write `val` plus the extension of
 * `size` value bits (0 bits for a small value: its value is in the symbol), then step one on.
 * ZRL is 15 zeros then a zero; EOB skips past the block (its write lands on the next block's
 * DC, which is written after it, or on the spare slot after the last block).
 * Bits 0-6 skip, 7-10 size, 16-31 val. */
static uint32_t AC_INFO[NSYM];

static void init_ac_info(void) {
  static const int small[4] = {-2, -1, 1, 2};
  AC_INFO[0] = 64u;      /* EOB */
  AC_INFO[1] = 15u;      /* ZRL */
  for (int r = 0; r < 16; r++) {
    for (int i = 0; i < 4; i++)
      AC_INFO[2 + 4 * r + i] = (uint32_t)r | (uint32_t)(uint16_t)(int16_t)small[i] << 16;
    for (int sz = 2; sz <= 10; sz++) AC_INFO[66 + 9 * r + sz - 2] = (uint32_t)r | (uint32_t)sz << 7;
  }
}

/* zig-zag position -> natural index, past the end onto the spare slot 64 */
static int ZZX[160];

/* Pass 1: a component's symbols, 4 rANS states in registers, no branch but the renormalisation.
 */
static void decode_symbols(const uint32_t *tab, const uint16_t *w, const uint32_t init[4],
                           size_t n, uint16_t *out) {
  uint32_t x0 = init[0], x1 = init[1], x2 = init[2], x3 = init[3];
#define D(x, j)                                                         \
  do {                                                                  \
    uint32_t e = tab[x & (PROB_SCALE - 1)];                             \
    out[i + j] = (uint16_t)(e & 0x1FF);                                 \
    x = (e >> 20) * (x >> PROB_BITS) + ((e >> 9) & (PROB_SCALE - 1));  \
    if (x < RANS_L) x = (x << 16) | *w++;                               \
  } while (0)
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    D(x0, 0);
    D(x1, 1);
    D(x2, 2);
    D(x3, 3);
  }
  if (i < n) D(x0, 0);
  if (i + 1 < n) D(x1, 1);
  if (i + 2 < n) D(x2, 2);
#undef D
}

/* Decode `in` into `out` (blocks zeroed here, as libjpeg does). */
static void decode(const Coded *in, const Coefs *shape, int16_t **out) {
  const uint64_t *bp = in->bits;
  uint64_t cur = bp[0], nxt = bp[1];
  int pos = 0; /* bits of cur used */
  bp += 2;
#define BITS(n, v)                                                  \
  do {                                                              \
    int n_ = (n);                                                   \
    uint64_t win = pos ? (cur << pos) | (nxt >> (64 - pos)) : cur;  \
    v = n_ ? (int)(win >> (64 - n_)) : 0;                           \
    pos += n_;                                                      \
    if (pos >= 64) {                                                \
      pos -= 64;                                                    \
      cur = nxt;                                                    \
      nxt = *bp++;                                                  \
    }                                                               \
  } while (0)
#define EXTEND(v, s) ((s) && (v) < (1 << ((s)-1)) ? (v) - (1 << (s)) + 1 : (v))
  for (int k = 0; k < shape->ncomp; k++) {
    uint16_t *sy = in->symbuf;
    decode_symbols(in->dec[k ? 1 : 0], in->words[k], in->init[k], in->nsym[k], sy);
    size_t nb = (size_t)shape->wb[k] * shape->hb[k];
    int16_t *blk = out[k];
    memset(blk, 0, nb * 64 * sizeof(int16_t));
    int pred = 0;
    /* pass 2: each block's symbols (and the value bits of large values) into its coefficients,
     * without a branch on the data but the end of the block */
    for (size_t b = 0; b < nb; b++, blk += 64) {
      int s = *sy++ - 256, v;
      BITS(s, v);
      pred += EXTEND(v, s);
      blk[0] = (int16_t)pred;
      int z = 1;
      while (z < 64) {
        uint32_t inf = AC_INFO[*sy++];
        int sz = (inf >> 7) & 15;
        uint64_t win = pos ? (cur << pos) | (nxt >> (64 - pos)) : cur;
        int raw = (int)((win >> 1) >> (63 - sz));
        pos += sz;
        if (pos >= 64) {
          pos -= 64;
          cur = nxt;
          nxt = *bp++;
        }
        int m = (1 << sz) - 1;
        int ext = raw - (raw < ((m + 1) >> 1) ? m : 0);
        z += inf & 127;
        blk[ZZX[z]] = (int16_t)((int32_t)inf >> 16) + (int16_t)ext;
        z++;
      }
    }
  }
}

/* ---- the benchmark ------------------------------------------------------------------------ */

typedef struct {
  unsigned char *data;
  size_t len;
  Coefs c;
  Coded p;
  int16_t *scratch[4];
} Image;

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [N] [ROUNDS]\n", argv[0]);
    return 2;
  }
  int want = argc > 2 ? atoi(argv[2]) : 1 << 30, rounds = argc > 3 ? atoi(argv[3]) : 5;
  DIR *dir = opendir(argv[1]);
  if (!dir) {
    perror(argv[1]);
    return 1;
  }
  char **names = NULL;
  int nn = 0;
  struct dirent *de;
  while ((de = readdir(dir))) {
    if (de->d_name[0] == '.') continue;
    names = realloc(names, (nn + 1) * sizeof(char *));
    names[nn++] = strdup(de->d_name);
  }
  closedir(dir);
  qsort(names, nn, sizeof(char *), (int (*)(const void *, const void *))strcmp);
  init_ac_info();
  for (int i = 0; i < 160; i++) ZZX[i] = i < 64 ? ZZ[i] : 64;
  Image *im = calloc(nn, sizeof(Image));
  int n = 0;
  size_t jpeg_bytes = 0, proto_bytes = 0, blocks = 0, syms = 0;
  for (int f = 0; f < nn && n < want; f++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[1], names[f]);
    FILE *fp = fopen(path, "rb");
    if (!fp) continue;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    Image *m = &im[n];
    m->data = malloc(len);
    m->len = fread(m->data, 1, len, fp);
    fclose(fp);
    if (jpeg_coefs(m->data, m->len, &m->c, 0)) continue; /* progressive or broken: skipped */
    encode(&m->c, &m->p);
    for (int k = 0; k < m->c.ncomp; k++) {
      m->scratch[k] = malloc(((size_t)m->c.wb[k] * m->c.hb[k] * 64 + 1) * sizeof(int16_t));
      blocks += (size_t)m->c.wb[k] * m->c.hb[k];
    }
    decode(&m->p, &m->c, m->scratch);
    for (int k = 0; k < m->c.ncomp; k++) {
      if (memcmp(m->scratch[k], m->c.coef[k], (size_t)m->c.wb[k] * m->c.hb[k] * 64 * 2)) {
        fprintf(stderr, "%s: component %d: the prototype's coefficients differ\n", path, k);
        return 1;
      }
    }
    jpeg_bytes += m->len;
    proto_bytes += m->p.nbits_words * 8 + 2 * NSYM * 2; /* value bits, tables as counts */
    for (int k = 0; k < m->c.ncomp; k++) proto_bytes += m->p.nwords[k] * 2 + 16;
    syms += m->p.total_sym;
    n++;
  }
  if (!n) {
    fprintf(stderr, "no baseline JPEGs in %s\n", argv[1]);
    return 1;
  }
  double *tj = malloc(rounds * sizeof(double)), *th = malloc(rounds * sizeof(double)),
         *tp = malloc(rounds * sizeof(double)), *ts = malloc(rounds * sizeof(double));
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    for (int i = 0; i < n; i++) jpeg_coefs(im[i].data, im[i].len, NULL, 0);
    double t1 = now();
    for (int i = 0; i < n; i++) jpeg_coefs(im[i].data, im[i].len, NULL, 1);
    double t2 = now();
    for (int i = 0; i < n; i++) decode(&im[i].p, &im[i].c, im[i].scratch);
    double t3 = now();
    for (int i = 0; i < n; i++)
      for (int k = 0; k < im[i].c.ncomp; k++)
        decode_symbols(im[i].p.dec[k ? 1 : 0], im[i].p.words[k], im[i].p.init[k], im[i].p.nsym[k],
                       im[i].p.symbuf);
    double t4 = now();
    ts[r] = t4 - t3;
    tj[r] = t1 - t0;
    th[r] = t2 - t1;
    tp[r] = t3 - t2;
  }
  qsort(tj, rounds, sizeof(double), cmp_d);
  qsort(th, rounds, sizeof(double), cmp_d);
  qsort(tp, rounds, sizeof(double), cmp_d);
  qsort(ts, rounds, sizeof(double), cmp_d);
  double j = tj[rounds / 2], h = th[rounds / 2], p = tp[rounds / 2];
  printf("images      %d baseline JPEGs of %s, %.1f MiB, %zu blocks, %zu symbols; every prototype "
         "decode equal to libjpeg-turbo's coefficients\n",
         n, argv[1], jpeg_bytes / 1048576.0, blocks, syms);
  printf("libjpeg     jpeg_read_coefficients %.3f s (headers alone %.3f s): entropy stage %.3f s, "
         "%.1f MB/s of JPEG, %.1f ns a block\n",
         j, h, j - h, jpeg_bytes / (j - h) / 1e6, (j - h) / blocks * 1e9);
  printf("prototype   rANS x4 symbols, small values in the symbol (a pass), then blocks branch-free (a pass): %.3f s, %.1f ns a block, %.2f ns a "
         "symbol; size %.3fx the JPEGs\n",
         p, p / blocks * 1e9, p / syms * 1e9, (double)proto_bytes / jpeg_bytes);
  printf("            of which the symbols alone (pass 1): %.3f s, %.2f ns a symbol\n", ts[rounds / 2],
         ts[rounds / 2] / syms * 1e9);
  printf("ratio       prototype %.2fx libjpeg-turbo's entropy stage (medians of %d alternated "
         "passes; target >= 2x)\n",
         (j - h) / p, rounds);
  return 0;
}
