/*
 * jdhuff.c
 *
 * This file was part of the Independent JPEG Group's software:
 * Copyright (C) 1991-1997, Thomas G. Lane.
 * Lossless JPEG Modifications:
 * Copyright (C) 1999, Ken Murchison.
 * libjpeg-turbo Modifications:
 * Copyright (C) 2009-2011, 2016, 2018-2019, 2022, D. R. Commander.
 * Copyright (C) 2018, Matthias Räncker.
 * For conditions of distribution and use, see the accompanying README.ijg
 * file.
 *
 * This file contains Huffman entropy decoding routines.
 *
 * Much of the complexity here has to do with supporting input suspension.
 * If the data source module demands suspension, we want to be able to back
 * up to the start of the current MCU.  To do this, we copy state variables
 * into local working storage, and update them back to the permanent
 * storage only upon successful completion of an MCU.
 *
 * NOTE: All referenced figures are from
 * Recommendation ITU-T T.81 (1992) | ISO/IEC 10918-1:1994.
 */

#define JPEG_INTERNALS
#include "jinclude.h"
#include "jpeglib.h"
#include "jdhuff.h"             /* Declarations shared with jd*huff.c */
#include "jpegapicomp.h"
#include "jstdhuff.c"


/*
 * Expanded entropy decoder object for Huffman decoding.
 *
 * The savable_state subrecord contains fields that change within an MCU,
 * but must not be updated permanently until we complete the MCU.
 */

typedef struct {
  int last_dc_val[MAX_COMPS_IN_SCAN]; /* last DC coef for each component */
} savable_state;

typedef struct {
  struct jpeg_entropy_decoder pub; /* public fields */

  /* These fields are loaded into local variables at start of each MCU.
   * In case of suspension, we exit WITHOUT updating them.
   */
  bitread_perm_state bitstate;  /* Bit buffer at start of MCU */
  savable_state saved;          /* Other state at start of MCU */

  /* These fields are NOT loaded into local working state. */
  unsigned int restarts_to_go;  /* MCUs left in this restart interval */

  /* Pointers to derived tables (these workspaces have image lifespan) */
  d_derived_tbl *dc_derived_tbls[NUM_HUFF_TBLS];
  d_derived_tbl *ac_derived_tbls[NUM_HUFF_TBLS];

  /* Precalculated info set up by start_pass for use in decode_mcu: */

  /* Pointers to derived tables to be used for each block within an MCU */
  d_derived_tbl *dc_cur_tbls[D_MAX_BLOCKS_IN_MCU];
  d_derived_tbl *ac_cur_tbls[D_MAX_BLOCKS_IN_MCU];
  /* Whether we care about the DC and AC coefficient values for each block */
  boolean dc_needed[D_MAX_BLOCKS_IN_MCU];
  boolean ac_needed[D_MAX_BLOCKS_IN_MCU];
} huff_entropy_decoder;

typedef huff_entropy_decoder *huff_entropy_ptr;


/*
 * Initialize for a Huffman-compressed scan.
 */

/* stokehold patch: fill fast (d_derived_tbl.fast, see jdhuff.h) for the
 * table htbl.  The codes of up to HUFF_LOOKAHEAD bits are made again as
 * jpeg_make_d_derived_tbl() makes them (canonical order; it has checked the
 * table already).  A code of length l followed by s value bits x owns, for
 * each x, a run of 2^(HUFF_FAST_BITS - l - s) entries; x becomes the
 * coefficient as HUFF_EXTEND() makes it: x when its top bit is set, else
 * x - (2^s - 1).
 */
LOCAL(void)
make_fast_tbl(const JHUFF_TBL *htbl, boolean isDC, int *fast_tbl)
{
  int l, n, x, t, p = 0;
  unsigned int code = 0;

  memset(fast_tbl, 0, sizeof(int) << HUFF_FAST_BITS);
  for (l = 1; l <= HUFF_LOOKAHEAD; l++) {
    for (n = 0; n < (int)htbl->bits[l]; n++, p++, code++) {
      int sym = htbl->huffval[p];
      int r = isDC ? 0 : sym >> 4;
      int s = isDC ? sym : sym & 15;
      int run, *fast;

      if (!isDC && s == 0) {
        /* EOB (and the undefined symbols with s == 0, which upstream's
         * decoder also takes for EOB): a run of FAST_EOB_RUN, which ends the
         * block; ZRL: a run of 15 and a coefficient of 0 (see make_pair_tbl()).
         */
        int entry = ((r == 15 ? 15 : FAST_EOB_RUN) << 8) | l;

        fast = fast_tbl + (code << (HUFF_FAST_BITS - l));
        for (t = 0; t < 1 << (HUFF_FAST_BITS - l); t++)
          *fast++ = entry;
        continue;
      }
      if (l + s > HUFF_FAST_BITS)
        continue;
      run = 1 << (HUFF_FAST_BITS - l - s);
      fast = fast_tbl + (code << (HUFF_FAST_BITS - l));
      for (x = 0; x < 1 << s; x++) {
        int value = s == 0 ? 0 : (x >> (s - 1)) ? x : x - ((1 << s) - 1);
        int entry = (int)(((unsigned int)value << 16) | (r << 8) | (l + s));

        for (t = 0; t < run; t++)
          *fast++ = entry;
      }
    }
    code <<= 1;
  }
}


/* stokehold patch: fill pair (d_derived_tbl.pair, see jdhuff.h) from an AC
 * table's fast: each entry of one symbol, and where the bits after it begin a
 * second symbol that fits in the rest of the HUFF_FAST_BITS bits, both.  A
 * first symbol of EOB is never paired (it ends the block).
 */
#define PAIR_ENTRY(total, r1, d2, bits1, v1, v2) \
  ((unsigned long long)(total) | ((unsigned long long)(r1) << 8) | \
   ((unsigned long long)(d2) << 16) | ((unsigned long long)(bits1) << 24) | \
   ((unsigned long long)(unsigned short)(v1) << 32) | \
   ((unsigned long long)(unsigned short)(v2) << 48))

LOCAL(void)
make_pair_tbl(const int *fast, unsigned long long *pair)
{
  int i;

  for (i = 0; i < 1 << HUFF_FAST_BITS; i++) {
    int e1 = fast[i], e2, bits1, r1, v1, bits2, r2;

    if (e1 == 0) {
      pair[i] = 0;
      continue;
    }
    bits1 = e1 & 0xFF;
    r1 = (e1 >> 8) & 0xFF;
    v1 = e1 >> 16;
    pair[i] = PAIR_ENTRY(bits1, r1, 0, bits1, v1, v1);
    if (r1 == FAST_EOB_RUN)
      continue;
    e2 = fast[(i << bits1) & ((1 << HUFF_FAST_BITS) - 1)];
    bits2 = e2 & 0xFF;
    if (e2 == 0 || bits1 + bits2 > HUFF_FAST_BITS)
      continue;
    r2 = (e2 >> 8) & 0xFF;
    pair[i] = PAIR_ENTRY(bits1 + bits2, r1,
                         r2 == FAST_EOB_RUN ? FAST_EOB_RUN : r2 + 1, bits1, v1,
                         e2 >> 16);
  }
}


/* stokehold patch: the fast and pair tables made last, shared by every
 * decompressor of the process.  Files from one encoder share their Huffman
 * tables (most use the standard ones), so that set_fast_tbls() finds them here
 * and builds nothing.  A slot is filled once (compare-and-swap) and never
 * changed or freed; when all are taken, tables are built per image as before.
 */
#define FAST_CACHE_SLOTS  16

typedef struct {
  int keylen;
  UINT8 key[1 + 16 + 256];      /* isDC, bits[1..16], huffval[0..n) */
  int fast[1 << HUFF_FAST_BITS];
  unsigned long long pair[1 << HUFF_FAST_BITS];
} fast_cache_entry;

static fast_cache_entry *fast_cache[FAST_CACHE_SLOTS];

/* stokehold patch: point dtbl->fast and, for an AC table, dtbl->pair (NULL
 * for a DC table) at the tables for dtbl->pub, from fast_cache[] or built
 * into dtbl's own arrays.
 */
LOCAL(void)
set_fast_tbls(d_derived_tbl *dtbl, boolean isDC)
{
  const JHUFF_TBL *htbl = dtbl->pub;
  UINT8 key[1 + 16 + 256];
  int keylen = 1 + 16, l, n = 0, i;
  fast_cache_entry *entry;

  key[0] = (UINT8)isDC;
  for (l = 1; l <= 16; l++) {
    key[l] = htbl->bits[l];
    n += htbl->bits[l];
  }
  if (n > 256)                  /* jpeg_make_d_derived_tbl() has refused it */
    n = 256;
  memcpy(key + keylen, htbl->huffval, n);
  keylen += n;
  for (i = 0; i < FAST_CACHE_SLOTS; i++) {
    entry = __atomic_load_n(&fast_cache[i], __ATOMIC_ACQUIRE);
    if (entry == NULL)
      break;
    if (entry->keylen == keylen && memcmp(entry->key, key, keylen) == 0) {
      dtbl->fast = entry->fast;
      dtbl->pair = isDC ? NULL : entry->pair;
      return;
    }
  }
  make_fast_tbl(htbl, isDC, dtbl->own_fast);
  if (!isDC)
    make_pair_tbl(dtbl->own_fast, dtbl->own_pair);
  dtbl->fast = dtbl->own_fast;
  dtbl->pair = isDC ? NULL : dtbl->own_pair;
  if (i == FAST_CACHE_SLOTS)
    return;
  entry = (fast_cache_entry *)malloc(sizeof(fast_cache_entry));
  if (entry == NULL)
    return;
  entry->keylen = keylen;
  memcpy(entry->key, key, keylen);
  memcpy(entry->fast, dtbl->own_fast, sizeof(entry->fast));
  if (!isDC)
    memcpy(entry->pair, dtbl->own_pair, sizeof(entry->pair));
  /* another thread may have taken the slot: then this entry is dropped (the
   * next lookup finds that thread's, or a later slot is tried then) */
  {
    fast_cache_entry *expected = NULL;

    if (!__atomic_compare_exchange_n(&fast_cache[i], &expected, entry, 0,
                                     __ATOMIC_RELEASE, __ATOMIC_RELAXED))
      free(entry);
  }
}


METHODDEF(void)
start_pass_huff_decoder(j_decompress_ptr cinfo)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  int ci, blkn, dctbl, actbl;
  d_derived_tbl **pdtbl;
  jpeg_component_info *compptr;

  /* Check that the scan parameters Ss, Se, Ah/Al are OK for sequential JPEG.
   * This ought to be an error condition, but we make it a warning because
   * there are some baseline files out there with all zeroes in these bytes.
   */
  if (cinfo->Ss != 0 || cinfo->Se != DCTSIZE2 - 1 ||
      cinfo->Ah != 0 || cinfo->Al != 0)
    WARNMS(cinfo, JWRN_NOT_SEQUENTIAL);

  for (ci = 0; ci < cinfo->comps_in_scan; ci++) {
    compptr = cinfo->cur_comp_info[ci];
    dctbl = compptr->dc_tbl_no;
    actbl = compptr->ac_tbl_no;
    /* Compute derived values for Huffman tables */
    /* We may do this more than once for a table, but it's not expensive */
    pdtbl = (d_derived_tbl **)(entropy->dc_derived_tbls) + dctbl;
    jpeg_make_d_derived_tbl(cinfo, TRUE, dctbl, pdtbl);
    set_fast_tbls(*pdtbl, TRUE);
    pdtbl = (d_derived_tbl **)(entropy->ac_derived_tbls) + actbl;
    jpeg_make_d_derived_tbl(cinfo, FALSE, actbl, pdtbl);
    set_fast_tbls(*pdtbl, FALSE);
    /* Initialize DC predictions to 0 */
    entropy->saved.last_dc_val[ci] = 0;
  }

  /* Precalculate decoding info for each block in an MCU of this scan */
  for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
    ci = cinfo->MCU_membership[blkn];
    compptr = cinfo->cur_comp_info[ci];
    /* Precalculate which table to use for each block */
    entropy->dc_cur_tbls[blkn] = entropy->dc_derived_tbls[compptr->dc_tbl_no];
    entropy->ac_cur_tbls[blkn] = entropy->ac_derived_tbls[compptr->ac_tbl_no];
    /* Decide whether we really care about the coefficient values */
    if (compptr->component_needed) {
      entropy->dc_needed[blkn] = TRUE;
      /* we don't need the ACs if producing a 1/8th-size image */
      entropy->ac_needed[blkn] = (compptr->_DCT_scaled_size > 1);
    } else {
      entropy->dc_needed[blkn] = entropy->ac_needed[blkn] = FALSE;
    }
  }

  /* Initialize bitread state variables */
  entropy->bitstate.bits_left = 0;
  entropy->bitstate.get_buffer = 0; /* unnecessary, but keeps Purify quiet */
  entropy->pub.insufficient_data = FALSE;

  /* Initialize restart counter */
  entropy->restarts_to_go = cinfo->restart_interval;
}


/*
 * Compute the derived values for a Huffman table.
 * This routine also performs some validation checks on the table.
 *
 * Note this is also used by jdphuff.c and jdlhuff.c.
 */

GLOBAL(void)
jpeg_make_d_derived_tbl(j_decompress_ptr cinfo, boolean isDC, int tblno,
                        d_derived_tbl **pdtbl)
{
  JHUFF_TBL *htbl;
  d_derived_tbl *dtbl;
  int p, i, l, si, numsymbols;
  int lookbits, ctr;
  char huffsize[257];
  unsigned int huffcode[257];
  unsigned int code;

  /* Note that huffsize[] and huffcode[] are filled in code-length order,
   * paralleling the order of the symbols themselves in htbl->huffval[].
   */

  /* Find the input Huffman table */
  if (tblno < 0 || tblno >= NUM_HUFF_TBLS)
    ERREXIT1(cinfo, JERR_NO_HUFF_TABLE, tblno);
  htbl =
    isDC ? cinfo->dc_huff_tbl_ptrs[tblno] : cinfo->ac_huff_tbl_ptrs[tblno];
  if (htbl == NULL)
    ERREXIT1(cinfo, JERR_NO_HUFF_TABLE, tblno);

  /* Allocate a workspace if we haven't already done so. */
  if (*pdtbl == NULL)
    *pdtbl = (d_derived_tbl *)
      (*cinfo->mem->alloc_small) ((j_common_ptr)cinfo, JPOOL_IMAGE,
                                  sizeof(d_derived_tbl));
  dtbl = *pdtbl;
  dtbl->pub = htbl;             /* fill in back link */

  /* Figure C.1: make table of Huffman code length for each symbol */

  p = 0;
  for (l = 1; l <= 16; l++) {
    i = (int)htbl->bits[l];
    if (i < 0 || p + i > 256)   /* protect against table overrun */
      ERREXIT(cinfo, JERR_BAD_HUFF_TABLE);
    while (i--)
      huffsize[p++] = (char)l;
  }
  huffsize[p] = 0;
  numsymbols = p;

  /* Figure C.2: generate the codes themselves */
  /* We also validate that the counts represent a legal Huffman code tree. */

  code = 0;
  si = huffsize[0];
  p = 0;
  while (huffsize[p]) {
    while (((int)huffsize[p]) == si) {
      huffcode[p++] = code;
      code++;
    }
    /* code is now 1 more than the last code used for codelength si; but
     * it must still fit in si bits, since no code is allowed to be all ones.
     */
    if (((JLONG)code) >= (((JLONG)1) << si))
      ERREXIT(cinfo, JERR_BAD_HUFF_TABLE);
    code <<= 1;
    si++;
  }

  /* Figure F.15: generate decoding tables for bit-sequential decoding */

  p = 0;
  for (l = 1; l <= 16; l++) {
    if (htbl->bits[l]) {
      /* valoffset[l] = huffval[] index of 1st symbol of code length l,
       * minus the minimum code of length l
       */
      dtbl->valoffset[l] = (JLONG)p - (JLONG)huffcode[p];
      p += htbl->bits[l];
      dtbl->maxcode[l] = huffcode[p - 1]; /* maximum code of length l */
    } else {
      dtbl->maxcode[l] = -1;    /* -1 if no codes of this length */
    }
  }
  dtbl->valoffset[17] = 0;
  dtbl->maxcode[17] = 0xFFFFFL; /* ensures jpeg_huff_decode terminates */

  /* Compute lookahead tables to speed up decoding.
   * First we set all the table entries to 0, indicating "too long";
   * then we iterate through the Huffman codes that are short enough and
   * fill in all the entries that correspond to bit sequences starting
   * with that code.
   */

  for (i = 0; i < (1 << HUFF_LOOKAHEAD); i++)
    dtbl->lookup[i] = (HUFF_LOOKAHEAD + 1) << HUFF_LOOKAHEAD;

  p = 0;
  for (l = 1; l <= HUFF_LOOKAHEAD; l++) {
    for (i = 1; i <= (int)htbl->bits[l]; i++, p++) {
      /* l = current code's length, p = its index in huffcode[] & huffval[]. */
      /* Generate left-justified code followed by all possible bit sequences */
      lookbits = huffcode[p] << (HUFF_LOOKAHEAD - l);
      for (ctr = 1 << (HUFF_LOOKAHEAD - l); ctr > 0; ctr--) {
        dtbl->lookup[lookbits] = (l << HUFF_LOOKAHEAD) | htbl->huffval[p];
        lookbits++;
      }
    }
  }

  /* Validate symbols as being reasonable.
   * For AC tables, we make no check, but accept all byte values 0..255.
   * For DC tables, we require the symbols to be in range 0..15 in lossy mode
   * and 0..16 in lossless mode.  (Tighter bounds could be applied depending on
   * the data depth and mode, but this is sufficient to ensure safe decoding.)
   */
  if (isDC) {
    for (i = 0; i < numsymbols; i++) {
      int sym = htbl->huffval[i];
      if (sym < 0 || sym > (cinfo->master->lossless ? 16 : 15))
        ERREXIT(cinfo, JERR_BAD_HUFF_TABLE);
    }
  }
}


/*
 * Out-of-line code for bit fetching (shared with jdphuff.c and jdlhuff.c).
 * See jdhuff.h for info about usage.
 * Note: current values of get_buffer and bits_left are passed as parameters,
 * but are returned in the corresponding fields of the state struct.
 *
 * On most machines MIN_GET_BITS should be 25 to allow the full 32-bit width
 * of get_buffer to be used.  (On machines with wider words, an even larger
 * buffer could be used.)  However, on some machines 32-bit shifts are
 * quite slow and take time proportional to the number of places shifted.
 * (This is true with most PC compilers, for instance.)  In this case it may
 * be a win to set MIN_GET_BITS to the minimum value of 15.  This reduces the
 * average shift distance at the cost of more calls to jpeg_fill_bit_buffer.
 */

#ifdef SLOW_SHIFT_32
#define MIN_GET_BITS  15        /* minimum allowable value */
#else
#define MIN_GET_BITS  (BIT_BUF_SIZE - 7)
#endif


GLOBAL(boolean)
jpeg_fill_bit_buffer(bitread_working_state *state,
                     register bit_buf_type get_buffer, register int bits_left,
                     int nbits)
/* Load up the bit buffer to a depth of at least nbits */
{
  /* Copy heavily used state fields into locals (hopefully registers) */
  register const JOCTET *next_input_byte = state->next_input_byte;
  register size_t bytes_in_buffer = state->bytes_in_buffer;
  j_decompress_ptr cinfo = state->cinfo;

  /* Attempt to load at least MIN_GET_BITS bits into get_buffer. */
  /* (It is assumed that no request will be for more than that many bits.) */
  /* We fail to do so only if we hit a marker or are forced to suspend. */

  if (cinfo->unread_marker == 0) {      /* cannot advance past a marker */
    while (bits_left < MIN_GET_BITS) {
      register int c;

      /* Attempt to read a byte */
      if (bytes_in_buffer == 0) {
        if (!(*cinfo->src->fill_input_buffer) (cinfo))
          return FALSE;
        next_input_byte = cinfo->src->next_input_byte;
        bytes_in_buffer = cinfo->src->bytes_in_buffer;
      }
      bytes_in_buffer--;
      c = *next_input_byte++;

      /* If it's 0xFF, check and discard stuffed zero byte */
      if (c == 0xFF) {
        /* Loop here to discard any padding FF's on terminating marker,
         * so that we can save a valid unread_marker value.  NOTE: we will
         * accept multiple FF's followed by a 0 as meaning a single FF data
         * byte.  This data pattern is not valid according to the standard.
         */
        do {
          if (bytes_in_buffer == 0) {
            if (!(*cinfo->src->fill_input_buffer) (cinfo))
              return FALSE;
            next_input_byte = cinfo->src->next_input_byte;
            bytes_in_buffer = cinfo->src->bytes_in_buffer;
          }
          bytes_in_buffer--;
          c = *next_input_byte++;
        } while (c == 0xFF);

        if (c == 0) {
          /* Found FF/00, which represents an FF data byte */
          c = 0xFF;
        } else {
          /* Oops, it's actually a marker indicating end of compressed data.
           * Save the marker code for later use.
           * Fine point: it might appear that we should save the marker into
           * bitread working state, not straight into permanent state.  But
           * once we have hit a marker, we cannot need to suspend within the
           * current MCU, because we will read no more bytes from the data
           * source.  So it is OK to update permanent state right away.
           */
          cinfo->unread_marker = c;
          /* See if we need to insert some fake zero bits. */
          goto no_more_bytes;
        }
      }

      /* OK, load c into get_buffer */
      get_buffer = (get_buffer << 8) | c;
      bits_left += 8;
    } /* end while */
  } else {
no_more_bytes:
    /* We get here if we've read the marker that terminates the compressed
     * data segment.  There should be enough bits in the buffer register
     * to satisfy the request; if so, no problem.
     */
    if (nbits > bits_left) {
      /* Uh-oh.  Report corrupted data to user and stuff zeroes into
       * the data stream, so that we can produce some kind of image.
       * We use a nonvolatile flag to ensure that only one warning message
       * appears per data segment.
       */
      if (!cinfo->entropy->insufficient_data) {
        WARNMS(cinfo, JWRN_HIT_MARKER);
        cinfo->entropy->insufficient_data = TRUE;
      }
      /* Fill the buffer with zero bits */
      get_buffer <<= MIN_GET_BITS - bits_left;
      bits_left = MIN_GET_BITS;
    }
  }

  /* Unload the local registers */
  state->next_input_byte = next_input_byte;
  state->bytes_in_buffer = bytes_in_buffer;
  state->get_buffer = get_buffer;
  state->bits_left = bits_left;

  return TRUE;
}


/* Macro version of the above, which performs much better but does not
   handle markers.  We have to hand off any blocks with markers to the
   slower routines. */

#define GET_BYTE { \
  register int c0, c1; \
  c0 = *buffer++; \
  c1 = *buffer; \
  /* Pre-execute most common case */ \
  get_buffer = (get_buffer << 8) | c0; \
  bits_left += 8; \
  if (c0 == 0xFF) { \
    /* Pre-execute case of FF/00, which represents an FF data byte */ \
    buffer++; \
    if (c1 != 0) { \
      /* Oops, it's actually a marker indicating end of compressed data. */ \
      cinfo->unread_marker = c1; \
      /* Back out pre-execution and fill the buffer with zero bits */ \
      buffer -= 2; \
      get_buffer &= ~0xFF; \
      zero_bits += 8; /* stokehold patch: see decode_mcu_fast() */ \
    } \
  } \
}

#if SIZEOF_SIZE_T == 8 || defined(_WIN64) || (defined(__x86_64__) && defined(__ILP32__))

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__

/* Pre-fetch 48 bytes, because the holding register is 64-bit.  stokehold
 * patch: the six bytes are loaded at once and taken together when none of
 * them is 0xFF (a stuffed byte or a marker, which GET_BYTE handles one at a
 * time as before): the same bits, one branch instead of six.  (The fast
 * decoder always has 512 bytes per block of the MCU left in its input, so the
 * 8-byte load stays inside it.)
 */
#define FILL_BIT_BUFFER_FAST \
  if (bits_left <= 16) { \
    bit_buf_type next6, not6; \
    memcpy(&next6, buffer, sizeof(next6)); \
    next6 = __builtin_bswap64(next6) >> 16; \
    not6 = ~next6 & 0xFFFFFFFFFFFFULL; \
    if (((not6 - 0x010101010101ULL) & ~not6 & 0x808080808080ULL) == 0) { \
      get_buffer = (get_buffer << 48) | next6; \
      buffer += 6; \
      bits_left += 48; \
    } else { \
      GET_BYTE GET_BYTE GET_BYTE GET_BYTE GET_BYTE GET_BYTE \
    } \
  }

#else

/* Pre-fetch 48 bytes, because the holding register is 64-bit */
#define FILL_BIT_BUFFER_FAST \
  if (bits_left <= 16) { \
    GET_BYTE GET_BYTE GET_BYTE GET_BYTE GET_BYTE GET_BYTE \
  }

#endif

#else

/* Pre-fetch 16 bytes, because the holding register is 32-bit */
#define FILL_BIT_BUFFER_FAST \
  if (bits_left <= 16) { \
    GET_BYTE GET_BYTE \
  }

#endif


/*
 * Out-of-line code for Huffman code decoding.
 * See jdhuff.h for info about usage.
 */

GLOBAL(int)
jpeg_huff_decode(bitread_working_state *state,
                 register bit_buf_type get_buffer, register int bits_left,
                 d_derived_tbl *htbl, int min_bits)
{
  register int l = min_bits;
  register JLONG code;

  /* HUFF_DECODE has determined that the code is at least min_bits */
  /* bits long, so fetch that many bits in one swoop. */

  CHECK_BIT_BUFFER(*state, l, return -1);
  code = GET_BITS(l);

  /* Collect the rest of the Huffman code one bit at a time. */
  /* This is per Figure F.16. */

  while (code > htbl->maxcode[l]) {
    code <<= 1;
    CHECK_BIT_BUFFER(*state, 1, return -1);
    code |= GET_BITS(1);
    l++;
  }

  /* Unload the local registers */
  state->get_buffer = get_buffer;
  state->bits_left = bits_left;

  /* With garbage input we may reach the sentinel value l = 17. */

  if (l > 16) {
    WARNMS(state->cinfo, JWRN_HUFF_BAD_CODE);
    return 0;                   /* fake a zero as the safest result */
  }

  return htbl->pub->huffval[(int)(code + htbl->valoffset[l])];
}


/*
 * Figure F.12: extend sign bit.
 * On some machines, a shift and add will be faster than a table lookup.
 */

#define AVOID_TABLES
#ifdef AVOID_TABLES

#define NEG_1  ((unsigned int)-1)
#define HUFF_EXTEND(x, s) \
  ((x) + ((((x) - (1 << ((s) - 1))) >> 31) & (((NEG_1) << (s)) + 1)))

#else

#define HUFF_EXTEND(x, s) \
  ((x) < extend_test[s] ? (x) + extend_offset[s] : (x))

static const int extend_test[16] = {   /* entry n is 2**(n-1) */
  0, 0x0001, 0x0002, 0x0004, 0x0008, 0x0010, 0x0020, 0x0040, 0x0080,
  0x0100, 0x0200, 0x0400, 0x0800, 0x1000, 0x2000, 0x4000
};

static const int extend_offset[16] = { /* entry n is (-1 << n) + 1 */
  0, ((-1) << 1) + 1, ((-1) << 2) + 1, ((-1) << 3) + 1, ((-1) << 4) + 1,
  ((-1) << 5) + 1, ((-1) << 6) + 1, ((-1) << 7) + 1, ((-1) << 8) + 1,
  ((-1) << 9) + 1, ((-1) << 10) + 1, ((-1) << 11) + 1, ((-1) << 12) + 1,
  ((-1) << 13) + 1, ((-1) << 14) + 1, ((-1) << 15) + 1
};

#endif /* AVOID_TABLES */


/*
 * Check for a restart marker & resynchronize decoder.
 * Returns FALSE if must suspend.
 */

LOCAL(boolean)
process_restart(j_decompress_ptr cinfo)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  int ci;

  /* Throw away any unused bits remaining in bit buffer; */
  /* include any full bytes in next_marker's count of discarded bytes */
  cinfo->marker->discarded_bytes += entropy->bitstate.bits_left / 8;
  entropy->bitstate.bits_left = 0;

  /* stokehold patch: bytes of a restart interval left undecoded mean damaged
   * data.  Upstream reports them only if it must search for the marker
   * (next_marker(), called by read_restart_marker() when unread_marker is 0);
   * when the bit reader had already read ahead to the marker, they are carried
   * over to a later marker, or never reported.  How far ahead the reader is
   * depends on which Huffman decoder ran, so report them here, at the marker
   * that ends the interval, whichever it was.
   */
  if (cinfo->unread_marker != 0 && cinfo->marker->discarded_bytes != 0) {
    WARNMS2(cinfo, JWRN_EXTRANEOUS_DATA, cinfo->marker->discarded_bytes,
            cinfo->unread_marker);
    cinfo->marker->discarded_bytes = 0;
  }

  /* Advance past the RSTn marker */
  if (!(*cinfo->marker->read_restart_marker) (cinfo))
    return FALSE;

  /* Re-initialize DC predictions to 0 */
  for (ci = 0; ci < cinfo->comps_in_scan; ci++)
    entropy->saved.last_dc_val[ci] = 0;

  /* Reset restart counter */
  entropy->restarts_to_go = cinfo->restart_interval;

  /* Reset out-of-data flag, unless read_restart_marker left us smack up
   * against a marker.  In that case we will end up treating the next data
   * segment as empty, and we can avoid producing bogus output pixels by
   * leaving the flag set.
   */
  if (cinfo->unread_marker == 0)
    entropy->pub.insufficient_data = FALSE;

  return TRUE;
}


#if defined(__has_feature)
#if __has_feature(undefined_behavior_sanitizer)
__attribute__((no_sanitize("signed-integer-overflow"),
               no_sanitize("unsigned-integer-overflow")))
#endif
#endif
LOCAL(boolean)
decode_mcu_slow(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  BITREAD_STATE_VARS;
  int blkn;
  savable_state state;
  /* Outer loop handles each block in the MCU */

  /* Load up working state */
  BITREAD_LOAD_STATE(cinfo, entropy->bitstate);
  state = entropy->saved;

  for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
    JBLOCKROW block = MCU_data ? MCU_data[blkn] : NULL;
    d_derived_tbl *dctbl = entropy->dc_cur_tbls[blkn];
    d_derived_tbl *actbl = entropy->ac_cur_tbls[blkn];
    register int s, k, r;

    /* Decode a single block's worth of coefficients */

    /* Section F.2.2.1: decode the DC coefficient difference */
    HUFF_DECODE(s, br_state, dctbl, return FALSE, label1);
    if (s) {
      CHECK_BIT_BUFFER(br_state, s, return FALSE);
      r = GET_BITS(s);
      s = HUFF_EXTEND(r, s);
    }

    if (entropy->dc_needed[blkn]) {
      /* Convert DC difference to actual value, update last_dc_val */
      int ci = cinfo->MCU_membership[blkn];
      /* Certain malformed JPEG images produce repeated DC coefficient
       * differences of 2047 or -2047, which causes state.last_dc_val[ci] to
       * grow until it overflows or underflows a 32-bit signed integer.  This
       * behavior is, to the best of our understanding, innocuous, and it is
       * unclear how to work around it without potentially affecting
       * performance.  Thus, we (hopefully temporarily) suppress UBSan integer
       * overflow errors for this function and decode_mcu_fast().
       */
      s += state.last_dc_val[ci];
      state.last_dc_val[ci] = s;
      if (block) {
        /* Output the DC coefficient (assumes jpeg_natural_order[0] = 0) */
        (*block)[0] = (JCOEF)s;
      }
    }

    if (entropy->ac_needed[blkn] && block) {

      /* Section F.2.2.2: decode the AC coefficients */
      /* Since zeroes are skipped, output area must be cleared beforehand */
      for (k = 1; k < DCTSIZE2; k++) {
        HUFF_DECODE(s, br_state, actbl, return FALSE, label2);

        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          CHECK_BIT_BUFFER(br_state, s, return FALSE);
          r = GET_BITS(s);
          s = HUFF_EXTEND(r, s);
          /* Output coefficient in natural (dezigzagged) order.
           * Note: the extra entries in jpeg_natural_order[] will save us
           * if k >= DCTSIZE2, which could happen if the data is corrupted.
           */
          (*block)[jpeg_natural_order[k]] = (JCOEF)s;
        } else {
          if (r != 15)
            break;
          k += 15;
        }
      }

    } else {

      /* Section F.2.2.2: decode the AC coefficients */
      /* In this path we just discard the values */
      for (k = 1; k < DCTSIZE2; k++) {
        HUFF_DECODE(s, br_state, actbl, return FALSE, label3);

        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          CHECK_BIT_BUFFER(br_state, s, return FALSE);
          DROP_BITS(s);
        } else {
          if (r != 15)
            break;
          k += 15;
        }
      }
    }
  }

  /* Completed MCU, so update state */
  BITREAD_SAVE_STATE(cinfo, entropy->bitstate);
  entropy->saved = state;
  return TRUE;
}


#if defined(__has_feature)
#if __has_feature(undefined_behavior_sanitizer)
__attribute__((no_sanitize("signed-integer-overflow"),
               no_sanitize("unsigned-integer-overflow")))
#endif
#endif
/* stokehold patch: an empty d_derived_tbl.fast and .pair, used when
 * stokehold_jdhuff_fast_restarts is 0 (every lookup then falls through to
 * upstream's code).
 */
static const int no_fast[1 << HUFF_FAST_BITS];
static const unsigned long long no_pair[1 << HUFF_FAST_BITS];

/* stokehold patch: jpeg_natural_order[] with 64 extra entries of 63 instead
 * of 16, for the stores of decode_mcu_fast()'s one-lookup path, where the
 * position may pass 63 by a run of FAST_EOB_RUN (EOB, up to 127) as well as by
 * a run of up to 15 or 16 (damaged data, as upstream).  Such a store writes to
 * coefficient 63 while it is still 0 (a block's loop ends once a position of
 * 63 or more has been stored to), and stores 0 unless upstream would store the
 * same value there too (a run past 63).
 */
static const int fast_natural_order[DCTSIZE2 + FAST_EOB_RUN] = {
   0,  1,  8, 16,  9,  2,  3, 10, 17, 24, 32, 25, 18, 11,  4,  5,
  12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13,  6,  7, 14, 21, 28,
  35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
  58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
  63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
  63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
  63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
  63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63
};

LOCAL(boolean)
decode_mcu_fast(j_decompress_ptr cinfo, JBLOCKROW *MCU_data, boolean last,
                boolean patched)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  BITREAD_STATE_VARS;
  JOCTET *buffer;
  int blkn;
  int bad_code = 0; /* stokehold patch: set by HUFF_DECODE_FAST on an invalid code */
  int zero_bits = 0; /* stokehold patch: zero bits GET_BYTE put in at a marker */
  savable_state state;
  /* Outer loop handles each block in the MCU */

  /* Load up working state */
  BITREAD_LOAD_STATE(cinfo, entropy->bitstate);
  buffer = (JOCTET *)br_state.next_input_byte;
  state = entropy->saved;

  for (blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
    JBLOCKROW block = MCU_data ? MCU_data[blkn] : NULL;
    d_derived_tbl *dctbl = entropy->dc_cur_tbls[blkn];
    d_derived_tbl *actbl = entropy->ac_cur_tbls[blkn];
    const int *dcfast = patched ? dctbl->fast : no_fast; /* stokehold patch */
    const unsigned long long *acpair = patched ? actbl->pair : no_pair;
    register int s, k, r, l;

    /* stokehold patch: code and value bits in one lookup where they fit in
     * HUFF_FAST_BITS bits (dctbl->fast, see jdhuff.h); else as upstream.
     */
    FILL_BIT_BUFFER_FAST
    s = dcfast[PEEK_BITS(HUFF_FAST_BITS)];
    if (s) {
      DROP_BITS(s & 0xFF);
      s >>= 16;
    } else {
      HUFF_DECODE_FAST(s, l, dctbl);
      if (s) {
        FILL_BIT_BUFFER_FAST
        r = GET_BITS(s);
        s = HUFF_EXTEND(r, s);
      }
    }

    if (entropy->dc_needed[blkn]) {
      int ci = cinfo->MCU_membership[blkn];
      /* Refer to the comment in decode_mcu_slow() regarding the supression of
       * a UBSan integer overflow error in this line of code.
       */
      s += state.last_dc_val[ci];
      state.last_dc_val[ci] = s;
      if (block)
        (*block)[0] = (JCOEF)s;
    }

    if (entropy->ac_needed[blkn] && block) {

      for (k = 1; k < DCTSIZE2; k++) {
        /* stokehold patch: one or two symbols, with their runs and values,
         * in one lookup where they fit (actbl->pair, see jdhuff.h); else as
         * upstream.  The second of two is this block's only when the first
         * leaves the block open (position below 63); else the first alone.
         */
        unsigned long long e;

        FILL_BIT_BUFFER_FAST
        e = acpair[PEEK_BITS(HUFF_FAST_BITS)];
        if (e) {
          int p1 = k + (int)((e >> 8) & 0xFF), d2 = (int)((e >> 16) & 0xFF);

          if (p1 >= DCTSIZE2 - 1 && d2) {
            DROP_BITS((int)((e >> 24) & 0xFF));
            (*block)[fast_natural_order[p1]] = (JCOEF)(e >> 32);
            k = p1;
            continue;
          }
          DROP_BITS((int)(e & 0xFF));
          (*block)[fast_natural_order[p1]] = (JCOEF)(e >> 32);
          k = p1 + d2;
          (*block)[fast_natural_order[k]] = (JCOEF)(e >> 48);
          continue;
        }
        HUFF_DECODE_FAST(s, l, actbl);
        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          FILL_BIT_BUFFER_FAST
          r = GET_BITS(s);
          s = HUFF_EXTEND(r, s);
          (*block)[jpeg_natural_order[k]] = (JCOEF)s;
        } else {
          if (r != 15) break;
          k += 15;
        }
      }

    } else {

      for (k = 1; k < DCTSIZE2; k++) {
        unsigned long long e;

        FILL_BIT_BUFFER_FAST
        e = acpair[PEEK_BITS(HUFF_FAST_BITS)];
        if (e) { /* stokehold patch: as above */
          int p1 = k + (int)((e >> 8) & 0xFF), d2 = (int)((e >> 16) & 0xFF);

          if (p1 >= DCTSIZE2 - 1 && d2) {
            DROP_BITS((int)((e >> 24) & 0xFF));
            k = p1;
            continue;
          }
          DROP_BITS((int)(e & 0xFF));
          k = p1 + d2;
          continue;
        }
        HUFF_DECODE_FAST(s, l, actbl);
        r = s >> 4;
        s &= 15;

        if (s) {
          k += r;
          FILL_BIT_BUFFER_FAST
          DROP_BITS(s);
        } else {
          if (r != 15) break;
          k += 15;
        }
      }
    }
  }

  /* stokehold patch: the last MCU of a restart interval (last) is followed by
   * at most 7 padding bits and the RSTn marker (or EOI), so the bit reader
   * has usually put zero bits in after the marker.  Its result stands when it
   * used none of them and what it left before the marker is only the padding
   * (fewer than 8 bits, the reader at the marker): exactly the bits the slow
   * decoder would have read, and the state it would have left (the marker
   * still to be read by process_restart() or the marker reader, nothing
   * discarded).  Anything else, damaged data above all, goes to the slow
   * decoder as before.  Everywhere else upstream's rule holds: an MCU during
   * which the reader met a marker is decoded again on the slow path.
   */
  if (last && bits_left >= zero_bits && bits_left - zero_bits < 8 &&
      buffer[0] == 0xFF && buffer[1] != 0 && buffer[1] != 0xFF) {
    get_buffer >>= zero_bits;
    bits_left -= zero_bits;
    cinfo->unread_marker = 0;
  } else if (cinfo->unread_marker != 0 || last) {
    cinfo->unread_marker = 0;
    return FALSE;
  }

  /* stokehold patch: inside a restart interval, an invalid Huffman code is
   * handed to decode_mcu_slow() (nothing has been saved yet), which warns
   * about it exactly as unpatched libjpeg-turbo does when it decodes restart-
   * marked data on the slow path only.  Files without restart markers keep the
   * upstream behaviour (the code is decoded as 0 without a warning).
   */
  if (bad_code && cinfo->restart_interval)
    return FALSE;

  br_state.bytes_in_buffer -= (buffer - br_state.next_input_byte);
  br_state.next_input_byte = buffer;
  BITREAD_SAVE_STATE(cinfo, entropy->bitstate);
  entropy->saved = state;
  return TRUE;
}


/*
 * Decode and return one MCU's worth of Huffman-compressed coefficients.
 * The coefficients are reordered from zigzag order into natural array order,
 * but are not dequantized.
 *
 * The i'th block of the MCU is stored into the block pointed to by
 * MCU_data[i].  WE ASSUME THIS AREA HAS BEEN ZEROED BY THE CALLER.
 * (Wholesale zeroing is usually a little faster than retail...)
 *
 * Returns FALSE if data source requested suspension.  In that case no
 * changes have been made to permanent state.  (Exception: some output
 * coefficients may already have been assigned.  This is harmless for
 * this module, since we'll just re-assign them on the next call.)
 */

#define BUFSIZE  (DCTSIZE2 * 8)

/* stokehold patch: whether decode_mcu() uses the fast decoder inside restart
 * intervals and the one-lookup code and value tables (1, the default) or
 * decodes as upstream libjpeg-turbo does: only the slow decoder wherever the
 * image has restart markers, lookup[] and separate value bits elsewhere (0).
 * Only stokehold's differential tests and fuzzing set it to 0, to compare the
 * two in one binary; it is read once per MCU with a relaxed atomic load (GCC
 * and Clang builtins: stokehold builds this library with either).
 */
int stokehold_jdhuff_fast_restarts = 1;

METHODDEF(boolean)
decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
  huff_entropy_ptr entropy = (huff_entropy_ptr)cinfo->entropy;
  int usefast = 1;
  boolean last = FALSE; /* stokehold patch: see decode_mcu_fast() */
  boolean patched =
    __atomic_load_n(&stokehold_jdhuff_fast_restarts, __ATOMIC_RELAXED) != 0;

  /* Process restart marker if needed; may have to suspend */
  if (cinfo->restart_interval) {
    if (entropy->restarts_to_go == 0)
      if (!process_restart(cinfo))
        return FALSE;
    /* stokehold patch (libjpeg-turbo issue #910): upstream turns the fast
     * decoder off for the whole image whenever a restart interval is set.  The
     * fast decoder stops at any marker and then hands the MCU to the slow one
     * (nothing saved), and with the invalid-code check in decode_mcu_fast() it
     * decodes exactly what the slow one would.  The last MCU of each interval
     * (where the padding bits and the RSTn marker follow) is tried on the fast
     * decoder too, which keeps its result only where the slow one could not
     * differ (see the end of decode_mcu_fast()).
     */
    if (!patched)
      usefast = 0;
    else if (entropy->restarts_to_go == 1)
      last = TRUE;
  }

  if (cinfo->src->bytes_in_buffer < BUFSIZE * (size_t)cinfo->blocks_in_MCU ||
      cinfo->unread_marker != 0)
    usefast = 0;

  /* If we've run out of data, just leave the MCU set to zeroes.
   * This way, we return uniform gray for the remainder of the segment.
   */
  if (!entropy->pub.insufficient_data) {

    if (usefast) {
      if (!decode_mcu_fast(cinfo, MCU_data, last, patched)) goto use_slow;
    } else {
use_slow:
      if (!decode_mcu_slow(cinfo, MCU_data)) return FALSE;
    }

  }

  /* Account for restart interval (no-op if not using restarts) */
  if (cinfo->restart_interval)
    entropy->restarts_to_go--;

  return TRUE;
}


/*
 * Module initialization routine for Huffman entropy decoding.
 */

GLOBAL(void)
jinit_huff_decoder(j_decompress_ptr cinfo)
{
  huff_entropy_ptr entropy;
  int i;

  /* Motion JPEG frames typically do not include the Huffman tables if they
     are the default tables.  Thus, if the tables are not set by the time
     the Huffman decoder is initialized (usually within the body of
     jpeg_start_decompress()), we set them to default values. */
  std_huff_tables((j_common_ptr)cinfo);

  entropy = (huff_entropy_ptr)
    (*cinfo->mem->alloc_small) ((j_common_ptr)cinfo, JPOOL_IMAGE,
                                sizeof(huff_entropy_decoder));
  cinfo->entropy = (struct jpeg_entropy_decoder *)entropy;
  entropy->pub.start_pass = start_pass_huff_decoder;
  entropy->pub.decode_mcu = decode_mcu;

  /* Mark tables unallocated */
  for (i = 0; i < NUM_HUFF_TBLS; i++) {
    entropy->dc_derived_tbls[i] = entropy->ac_derived_tbls[i] = NULL;
  }
}
