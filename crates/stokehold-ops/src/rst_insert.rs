//! Restart markers put into a baseline JPEG without decoding it: the fast lossless rewrite behind
//! `stokehold pack`'s default (see [`crate::restart`] for why the markers pay).
//!
//! libjpeg-turbo's transcoder decodes every coefficient into memory, optimises new Huffman
//! tables in a second pass and encodes everything again (about 1.3 ms for an ImageNet-sized
//! file). None of that is needed to add markers: walking the entropy-coded bits once is enough.
//! Each block's DC difference and AC run/size symbols are Huffman-decoded only to find where its
//! bits end; the bits are copied as they are, except the first DC difference of each component
//! after a marker, which is re-encoded against a predictor of 0 (what a restart means). The
//! tables, the coefficients and so the pixels stay exactly the same.
//!
//! One pass over the bits: `Plan::walk` finds where each interval's first blocks lie (a tight
//! loop: the reader refills unconditionally from padded data, four 13-bit lookups per refill,
//! each skipping all the AC symbols complete in the next 13 bits at once, with their coefficient
//! steps; tables are built once per thread for files that share them) and hands each to `Emit`,
//! which writes the input's bit spans up to it, shifted, seven bytes per store, with its DC
//! difference re-encoded — so the copying can overlap the walk's chain of lookups.
//! `tests/it/rst_equivalence.rs` holds it to the two-pass version it replaced (issue #50), byte
//! for byte.
//!
//! [`insert_restarts`] returns `None` for everything it does not handle — progressive or
//! arithmetic coding, several scans, 12-bit samples, files that already have restart markers,
//! other than 1 or 3 components, a DC category the file's own table has no code for, damaged
//! data — and the caller falls back to libjpeg-turbo's transcoder ([`crate::jpeg::with_restarts`]).
//! Every length and count read from the file is checked against the bytes present before use;
//! nothing panics on any input (`fuzzing::fuzz_image`, the image fuzz target, runs it on arbitrary
//! bytes).

use std::cell::RefCell;
use std::rc::Rc;

/// A Huffman table in both directions: decoding by a [`FAST_BITS`]-bit lookup with the canonical slow path
/// behind it, and encoding (needed for DC tables only).
struct Huffman {
    /// Indexed by the next [`FAST_BITS`] bits: `length << 8 | symbol`, or 0 for longer codes.
    fast: [u16; 1 << FAST_BITS],
    /// Per code length 1..=16: the largest code of that length (-1: none) and the index in
    /// `symbols` of the first code of that length minus that code.
    maxcode: [i32; 17],
    offset: [i32; 17],
    symbols: Vec<u8>,
    /// Per symbol: its code and length (length 0: the table has no code for it).
    encode: [(u16, u8); 256],
    /// For AC tables, indexed like `fast`: `ac_step(symbol) << 8 | (code length + value bits)`
    /// (0 for longer codes): a block's AC values are never needed, only where they end.
    fast_skip: [u16; 1 << FAST_BITS],
    /// For AC tables ([`Huffman::with_multi`]), indexed by the next [`MULTI_BITS`] bits: the
    /// symbols complete within them, up to and including an end of block, at once:
    /// `k_step << 4 | bits`, where `bits` is their bit count (0: not one complete symbol) and
    /// `k_step` the coefficient steps of those before an end of block (at most 63: an entry
    /// stops before a symbol that would pass it), plus [`EOB_STEP`] when they end with one (see
    /// [`multi_fits`]). All 0 for DC tables. Two bytes an entry: 16 KiB, as L1-friendly as the
    /// 12-bit table of four-byte entries it replaced; a fixed-size array, so that indexing
    /// needs no bounds check.
    multi: Box<[u16; 1 << MULTI_BITS]>,
}

const FAST_BITS: u32 = 11;
const MULTI_BITS: u32 = 13;

impl Huffman {
    /// Build from a DHT table's 16 counts and its symbols; `None` for an over-full table.
    fn new(counts: &[u8], symbols: &[u8]) -> Option<Huffman> {
        let mut h = Huffman {
            fast: [0; 1 << FAST_BITS],
            maxcode: [-1; 17],
            offset: [0; 17],
            symbols: symbols.to_vec(),
            encode: [(0, 0); 256],
            fast_skip: [0; 1 << FAST_BITS],
            multi: Box::new([0; 1 << MULTI_BITS]),
        };
        let mut code: u32 = 0;
        let mut k = 0usize;
        for len in 1..=16u32 {
            let n = usize::from(counts[len as usize - 1]);
            h.offset[len as usize] = k as i32 - code as i32;
            for _ in 0..n {
                if code >= 1 << len {
                    return None; // more codes than this length can hold
                }
                let sym = *symbols.get(k)?;
                h.encode[usize::from(sym)] = (code as u16, len as u8);
                if len <= FAST_BITS {
                    let shift = FAST_BITS - len;
                    let base = (code << shift) as usize;
                    let skip = u16::from(ac_step(sym)) << 8 | (len as u16 + u16::from(sym & 15));
                    h.fast[base..base + (1 << shift)].fill((len as u16) << 8 | u16::from(sym));
                    h.fast_skip[base..base + (1 << shift)].fill(skip);
                }
                code += 1;
                k += 1;
            }
            if n > 0 {
                h.maxcode[len as usize] = code as i32 - 1;
            }
            code <<= 1;
        }
        Some(h)
    }

    /// `self` with its [`Huffman::multi`] table.
    fn with_multi(mut self) -> Huffman {
        let entries: Vec<u16> = (0..1u32 << MULTI_BITS)
            .map(|prefix| self.multi_entry(prefix))
            .collect();
        self.multi.copy_from_slice(&entries);
        self
    }

    /// The [`Huffman::multi`] entry of the [`MULTI_BITS`]-bit `prefix`.
    fn multi_entry(&self, prefix: u32) -> u16 {
        let (mut used, mut steps) = (0u16, 0u16);
        loop {
            // the prefix's bits from `used` on, left-aligned in 16 (zeros after it)
            let peek = (prefix << (16 - MULTI_BITS) << used) & 0xFFFF;
            let e = self.fast[(peek >> (16 - FAST_BITS)) as usize];
            let (len, sym) = (e >> 8, e as u8);
            let bits = len + u16::from(sym & 15);
            let step = u16::from(ac_step(sym));
            if e == 0 || u32::from(used + bits) > MULTI_BITS {
                return steps << 4 | used; // the symbol is not all here
            }
            if step == u16::from(EOB_STEP) {
                return (steps + step) << 4 | (used + bits);
            }
            if steps + step > 63 {
                return steps << 4 | used; // past any block: left to one-symbol decoding
            }
            used += bits;
            steps += step;
        }
    }

    /// The next AC symbols of `r` skipped, from coefficient index `k`: the index after them
    /// (64 or more: the block ended). Several symbols per lookup where [`Huffman::multi`] has
    /// them all and they stay inside the block (at most [`MULTI_BITS`] bits: `r` must hold that
    /// many); else one symbol by [`Huffman::skip_ac`] (at most 26 bits) between two refills (at
    /// least 56 bits held after it, as after a refill).
    #[inline(always)]
    fn ac_step(&self, r: &mut Bits<'_>, k: u32) -> Option<u32> {
        let e = u32::from(self.multi[(r.peek16() >> (16 - MULTI_BITS)) as usize]);
        if multi_fits(e, k) {
            r.skip(e & 15);
            return Some(k + (e >> 4));
        }
        r.fill();
        let step = self.skip_ac(r)?;
        // refilled again, so that the lookups after it have as many bits as after any refill
        r.fill();
        ac_advance(k, step)
    }

    /// The next AC symbol of `r` skipped with its value bits (at most 26 bits: see
    /// [`Bits::skip`]), and its [`ac_step`].
    #[inline(always)]
    fn skip_ac(&self, r: &mut Bits<'_>) -> Option<u32> {
        let e = self.fast_skip[(r.peek16() >> (16 - FAST_BITS)) as usize];
        if e != 0 {
            r.skip(u32::from(e & 0xFF));
            return Some(u32::from(e >> 8));
        }
        let rs = self.decode(r)?;
        r.skip(u32::from(rs & 15));
        Some(u32::from(ac_step(rs)))
    }

    /// The next symbol of `r` (at most 16 bits).
    #[inline(always)]
    fn decode(&self, r: &mut Bits<'_>) -> Option<u8> {
        let peek = r.peek16();
        let e = self.fast[(peek >> (16 - FAST_BITS)) as usize];
        if e != 0 {
            r.skip(u32::from(e >> 8));
            return Some(e as u8);
        }
        for len in FAST_BITS + 1..=16 {
            let code = (peek >> (16 - len)) as i32;
            if code <= self.maxcode[len as usize] {
                r.skip(len);
                let i = usize::try_from(self.offset[len as usize] + code).ok()?;
                return self.symbols.get(i).copied();
            }
        }
        None // no code of any length matches: damaged data
    }
}

/// The 64 bits from bit `pos` of `data` (1-bits past its end), left-aligned.
#[inline(always)]
fn word_at(data: &[u8], pos: u64) -> u64 {
    let i = (pos >> 3) as usize;
    let w = match data.get(i..i + 8) {
        Some(b) => u64::from_be_bytes(b.try_into().unwrap_or([0xFF; 8])),
        None => {
            let mut b = [0xFF; 8];
            let rest = data.get(i..).unwrap_or(&[]);
            b[..rest.len().min(8)].copy_from_slice(&rest[..rest.len().min(8)]);
            u64::from_be_bytes(b)
        }
    };
    w << (pos & 7)
}

/// The 0xFF bytes after the entropy-coded data that [`Bits::fill`] reads instead of going past it.
const PAD: usize = 8;

/// A reader of the entropy-coded bits (byte stuffing already removed), most significant first,
/// through a 64-bit register refilled eight bytes at a time. Reading past the end yields 1-bits
/// (what an encoder pads with); whether a block ran past the end is checked once per block
/// ([`Bits::pos`] against `end`).
struct Bits<'a> {
    data: &'a [u8],
    /// The next byte of `data` not yet in `buf`.
    next: usize,
    /// Valid bits, left-aligned; `n` of them.
    buf: u64,
    n: u32,
    end: u64,
}

impl Bits<'_> {
    /// The position of the next unread bit.
    #[inline(always)]
    fn pos(&self) -> u64 {
        self.next as u64 * 8 - u64::from(self.n)
    }

    /// At least 56 valid bits in `buf`. Unconditional: a refill costs less than the branch
    /// mispredictions of testing whether one is due. `data` ends with [`PAD`] bytes of 0xFF
    /// (1-bits, as past the end): a read from beyond them reads them instead, the same bits.
    #[inline(always)]
    fn fill(&mut self) {
        let i = self.next.min(self.data.len().saturating_sub(PAD));
        let w = match self.data.get(i..i + PAD) {
            Some(b) => u64::from_be_bytes(b.try_into().unwrap_or([0xFF; 8])),
            None => u64::MAX, // `data` shorter than its padding: only 1-bits
        };
        self.buf |= w >> self.n;
        let k = (63 - self.n) >> 3;
        self.next += k as usize;
        self.n += 8 * k;
    }

    #[inline(always)]
    fn peek16(&self) -> u32 {
        (self.buf >> 48) as u32
    }

    /// Consume `k` (at most 32) bits. [`Bits::fill`] must have run since more than 56 were
    /// consumed: every caller reads at most 52 bits per refill (tables with longer values are
    /// refused before reading), so `n` cannot wrap.
    #[inline(always)]
    fn skip(&mut self, k: u32) {
        self.buf <<= k;
        self.n = self.n.wrapping_sub(k);
    }

    /// The next `k` (0..=16) bits as a number.
    #[inline(always)]
    fn take(&mut self, k: u32) -> u32 {
        let v = ((self.buf >> 1) >> (63 - k)) as u32;
        self.skip(k);
        v
    }
}

/// A writer of entropy-coded bits that stuffs a 0x00 after every 0xFF byte, into a buffer
/// sized ahead ([`Writer::room`]) so that each store is one eight-byte write at `len`.
struct Writer {
    buf: Vec<u8>,
    /// Bytes written; `buf` beyond them is scratch.
    len: usize,
    /// The last `n` bits of `acc` are pending; `n` < 8 between calls (every whole byte is out).
    acc: u64,
    n: u32,
}

impl Writer {
    fn new(capacity: usize) -> Writer {
        Writer {
            buf: vec![0; capacity + 16],
            len: 0,
            acc: 0,
            n: 0,
        }
    }

    /// Room in `buf` for `bits` more bits, each byte stuffed, and an eight-byte store past them.
    #[inline(always)]
    fn room(&mut self, bits: u64) {
        let need = self.len + (bits / 4) as usize + 16;
        if need > self.buf.len() {
            self.buf.resize(need.max(2 * self.buf.len()), 0);
        }
    }

    /// Append `bytes` (whole bytes are out: `n` is 0).
    fn bytes(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.n, 0);
        self.room(8 * bytes.len() as u64);
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Append the low `k` (0..=56) bits of `v` and write out every whole byte: one eight-byte
    /// store when none of them is 0xFF (the usual case), else byte by byte with stuffing.
    /// [`Writer::room`] must have made room for them.
    #[inline(always)]
    fn put(&mut self, v: u64, k: u32) {
        // at most 7 + 56 bits pending: they fit in `acc`
        let acc = (self.acc << k) | (v & ((1u64 << k) - 1));
        let n = self.n + k;
        let whole = n / 8;
        // the pending bits left-aligned: the whole bytes first
        let word = (acc << 1) << (63 - n);
        self.acc = acc;
        self.n = n & 7;
        // a flag per 0xFF byte (a borrow can flag a byte more significant than a true 0xFF,
        // never miss one: a flag among the whole bytes only sends them the slow way)
        let inv = !word;
        let ff = inv.wrapping_sub(0x0101_0101_0101_0101) & !inv & 0x8080_8080_8080_8080;
        // the whole bytes' flags (`whole` is at most 7: the lowest byte is never tested)
        let whole_bytes = !(u64::MAX >> (8 * whole));
        let at = self.len;
        if ff & whole_bytes == 0 {
            self.buf[at..at + 8].copy_from_slice(&word.to_be_bytes());
            self.len = at + whole as usize;
        } else {
            self.len = stuff(&mut self.buf, at, &word.to_be_bytes()[..whole as usize]);
        }
    }

    /// Copy bits `from..to` of `data` as they are, seven bytes per step (the spans between
    /// intervals' first blocks are most of a file), the last bits through [`Writer::put`].
    #[inline(always)]
    fn copy(&mut self, data: &[u8], mut from: u64, to: u64) {
        self.room(to - from);
        // the loop's state in locals, so that it stays in registers
        let (mut acc, n, mut len) = (self.acc, self.n, self.len);
        let buf = &mut self.buf[..];
        while from + 56 <= to {
            acc = (acc << 56) | (word_at(data, from) >> 8);
            // the oldest 56 of the n + 56 pending bits; the newest n stay pending
            let bytes = (acc >> n) & ((1 << 56) - 1);
            // no 0xFF among the seven bytes (the top byte of `bytes` is 0, so never matches)
            let inv = !bytes;
            let word = (bytes << 8).to_be_bytes();
            if inv.wrapping_sub(0x0101_0101_0101_0101) & !inv & 0x8080_8080_8080_8080 == 0 {
                // one eight-byte store; the eighth byte is scratch, written over next
                buf[len..len + 8].copy_from_slice(&word);
                len += 7;
            } else {
                len = stuff(buf, len, &word[..7]);
            }
            from += 56;
        }
        (self.acc, self.len) = (acc, len);
        if from < to {
            let k = (to - from) as u32;
            self.put(word_at(data, from) >> (64 - k), k);
        }
    }

    /// Pad the last byte with 1-bits, as the standard asks before a marker, and write it out.
    fn align(&mut self) {
        let pad = (8 - self.n) % 8;
        self.room(8);
        self.put((1u64 << pad) - 1, pad);
    }

    /// The bytes written.
    fn finish(mut self) -> Vec<u8> {
        self.buf.truncate(self.len);
        self.buf
    }
}

/// `bytes` written into `buf` at `at`, each 0xFF followed by a 0x00; where they end. `buf` has
/// room for twice their number ([`Writer::room`]). Apart from [`Writer::put`], so that its
/// registers stay its own.
#[cold]
#[inline(never)]
fn stuff(buf: &mut [u8], mut at: usize, bytes: &[u8]) -> usize {
    for &byte in bytes {
        buf[at] = byte;
        at += 1;
        if byte == 0xFF {
            buf[at] = 0;
            at += 1;
        }
    }
    at
}

/// How far AC symbol `rs` (run/size) moves the coefficient index: run + 1 for a value, 16 for a
/// run of 16 zeros, [`EOB_STEP`] for the end of block.
fn ac_step(rs: u8) -> u8 {
    match (rs >> 4, rs & 15) {
        (15, 0) => 16,
        (_, 0) => EOB_STEP,
        (run, _) => run + 1,
    }
}

/// Whether [`Huffman::multi`] entry `e` applies at coefficient index `k` (1..=63): it holds a
/// complete symbol, and its symbols before any end of block stay within the block. Its steps
/// are at most 63, so masking [`EOB_STEP`] off leaves `k` plus them.
#[inline(always)]
fn multi_fits(e: u32, k: u32) -> bool {
    e & 15 != 0 && (k + (e >> 4)) & (u32::from(EOB_STEP) - 1) <= 63
}

/// Larger than any index a block reaches otherwise (63 + 16), so one comparison tells the end of a
/// block from a run past its last coefficient.
const EOB_STEP: u8 = 128;

/// The coefficient index after an AC symbol of [`ac_step`] `step` read at index `k` (1..=63): 64
/// or more ends the block; `None` for a run past the block's last coefficient (index 63).
#[inline(always)]
fn ac_advance(k: u32, step: u32) -> Option<u32> {
    let k = k + step;
    // 65..=79: a value or a run of zeros beyond index 63 (EOB gives 129 or more)
    if k.wrapping_sub(65) < 15 {
        return None;
    }
    Some(k)
}

/// The magnitude category of a DC difference and its bits (JPEG's "extend" inverted).
fn dc_bits(v: i32) -> (u32, u32) {
    let cat = 32 - v.unsigned_abs().leading_zeros();
    let bits = if v < 0 { v - 1 } else { v } as u32;
    (cat, bits & ((1u32 << cat) - 1))
}

fn be16(d: &[u8], at: usize) -> Option<usize> {
    Some(usize::from(*d.get(at)?) << 8 | usize::from(*d.get(at + 1)?))
}

struct Component {
    id: u8,
    h: u32,
    v: u32,
}

/// A restart interval's first block of one component: where it starts, where its DC difference
/// ends, and the file's DC predictor before and after it.
#[derive(Debug)]
struct FirstBlock {
    start: u64,
    dc_end: u64,
    pred_before: i32,
    pred_after: i32,
}

/// The scan to walk: per component in scan order its DC and AC tables and blocks per MCU; the
/// number of MCUs; MCUs per restart interval.
struct Plan<'a, 't> {
    comps: &'a [(&'t Huffman, &'t Huffman, u32)],
    mcus: u64,
    interval: u64,
}

impl Plan<'_, '_> {
    /// Walk every block of the scan, handing each interval's first blocks to `emit` as soon as
    /// their DC differences are read (so that writing the output overlaps the walk's chain of
    /// table lookups); the bit position where the scan's blocks end. `None` for damaged data,
    /// data that ends inside a block, or a DC difference the table cannot re-encode.
    ///
    /// A function of its own so that the reader's state stays in registers.
    fn walk(&self, r: &mut Bits<'_>, emit: &mut Emit<'_>) -> Option<u64> {
        let mut b = Bits { ..*r };
        let mut pred = [0i32; 4];
        // the blocks of one MCU in scan order, flat: tables, component, and whether the block is
        // its component's first (one loop per MCU, not one per component and one per block)
        let blocks: Vec<(&Huffman, &Huffman, usize, bool)> = self
            .comps
            .iter()
            .enumerate()
            .flat_map(|(c, &(dct, act, n))| (0..n).map(move |i| (dct, act, c, i == 0)))
            .collect();
        // MCUs left before the next interval begins (a countdown, not a division per MCU)
        let mut to_interval = 0u64;
        for _ in 0..self.mcus {
            let first_mcu = to_interval == 0;
            if first_mcu {
                to_interval = self.interval;
                if b.pos() > b.end {
                    return None; // past the data (checked per interval, not only at the end:
                    // a crafted header could ask for billions of MCUs)
                }
            }
            to_interval -= 1;
            for &(dct, act, c, first_of_comp) in &blocks {
                let start = b.pos();
                b.fill();
                let s = u32::from(dct.decode(&mut b)?);
                // tables with larger DC categories are refused when read
                debug_assert!(s <= 11);
                // JPEG's "extend", without branches: below half the range means negative
                let v = b.take(s) as i32;
                let negative = i32::from(v < (1 << s) >> 1);
                let diff = v - negative * ((1 << s) - 1);
                let pred_before = pred[c];
                pred[c] += diff;
                if pred[c].unsigned_abs() > 1 << 16 {
                    return None; // far outside any 8-bit DC coefficient: damaged data
                }
                if first_mcu && first_of_comp {
                    let f = FirstBlock {
                        start,
                        dc_end: b.pos(),
                        pred_before,
                        pred_after: pred[c],
                    };
                    emit.first_block(c == 0, &f, dct)?;
                }
                // AC: only where the block's bits end. Two lookups share the DC's refill (at
                // most 27 bits, leaving 29: 13 for each fast lookup), then four per refill
                // (4 x 13 of at least 56); a lookup that is not all in its 13 bits refills before
                // and after its symbol (see [`Huffman::ac_step`]).
                let mut k = act.ac_step(&mut b, 1)?;
                if k < 64 {
                    k = act.ac_step(&mut b, k)?;
                    while k < 64 {
                        b.fill();
                        k = act.ac_step(&mut b, k)?;
                        if k < 64 {
                            k = act.ac_step(&mut b, k)?;
                            if k < 64 {
                                k = act.ac_step(&mut b, k)?;
                                if k < 64 {
                                    k = act.ac_step(&mut b, k)?;
                                }
                            }
                        }
                    }
                }
            }
        }
        // positions only grow: a block that ran past the data leaves the end past it too
        let end = b.pos();
        *r = b;
        (end <= r.end).then_some(end)
    }
}

/// Files from one encoder share their tables (most use the standard ones): the tables built
/// last on this thread, by class, counts and symbols, so that a table is built once, not per file.
const TABLE_CACHE: usize = 8;

thread_local! {
    static TABLES: RefCell<Vec<(Vec<u8>, Rc<Huffman>)>> = const { RefCell::new(Vec::new()) };
}

/// The table of a DHT entry (class 0: DC, 1: AC, with its [`Huffman::multi`]), from this
/// thread's cache when it was built before; `None` for an over-full table.
fn table(class: u8, counts: &[u8], symbols: &[u8]) -> Option<Rc<Huffman>> {
    let key: Vec<u8> = [class]
        .iter()
        .chain(counts)
        .chain(symbols)
        .copied()
        .collect();
    TABLES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, t)) = cache.iter().find(|(k, _)| *k == key) {
            return Some(Rc::clone(t));
        }
        let t = Huffman::new(counts, symbols)?;
        let t = Rc::new(if class == 1 { t.with_multi() } else { t });
        if cache.len() == TABLE_CACHE {
            cache.remove(0);
        }
        cache.push((key, Rc::clone(&t)));
        Some(t)
    })
}

/// `data` with restart markers every [`crate::jpeg::restart_interval`] MCUs (aligned to MCU
/// rows), the same tables and the same coefficients; `None` where the file is outside what this
/// handles (see the module documentation).
pub fn insert_restarts(data: &[u8]) -> Option<Vec<u8>> {
    if data.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut dc: [Option<Rc<Huffman>>; 4] = [None, None, None, None];
    let mut ac: [Option<Rc<Huffman>>; 4] = [None, None, None, None];
    let mut frame: Option<(u32, u32, Vec<Component>)> = None;
    let mut at = 2usize;
    // segments before the scan: copied as they are, the DRI segment added before the SOS
    let (sos_at, sos_len) = loop {
        if *data.get(at)? != 0xFF {
            return None;
        }
        while *data.get(at)? == 0xFF {
            at += 1;
        }
        let m = *data.get(at)?;
        let len = be16(data, at + 1)?;
        let seg = data.get(at + 3..(at + 1).checked_add(len)?)?;
        if len < 2 {
            return None;
        }
        match m {
            0xC0 | 0xC1 => {
                if frame.is_some() || seg.len() < 6 || seg[0] != 8 {
                    return None;
                }
                let h = be16(seg, 1)? as u32;
                let w = be16(seg, 3)? as u32;
                let n = usize::from(seg[5]);
                if w == 0 || h == 0 || !(n == 1 || n == 3) || seg.len() != 6 + 3 * n {
                    return None;
                }
                let comps: Vec<Component> = (0..n)
                    .map(|c| Component {
                        id: seg[6 + 3 * c],
                        h: u32::from(seg[7 + 3 * c] >> 4),
                        v: u32::from(seg[7 + 3 * c] & 15),
                    })
                    .collect();
                if comps
                    .iter()
                    .any(|c| !(1..=4).contains(&c.h) || !(1..=4).contains(&c.v))
                    || (n == 1 && (comps[0].h, comps[0].v) != (1, 1))
                {
                    return None;
                }
                frame = Some((w, h, comps));
            }
            0xC4 => {
                let mut s = seg;
                while !s.is_empty() {
                    let (class, id) = (s[0] >> 4, usize::from(s[0] & 15));
                    let counts = s.get(1..17)?;
                    let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
                    let symbols = s.get(17..17 + total)?;
                    if id > 3 || class > 1 || total > 256 {
                        return None;
                    }
                    // 8-bit data has AC values of at most 10 bits and DC differences of at
                    // most 11: a table with more is refused (the reader's refill depends on it)
                    if symbols
                        .iter()
                        .any(|&v| if class == 0 { v > 11 } else { v & 15 > 10 })
                    {
                        return None;
                    }
                    let table = Some(table(class, counts, symbols)?);
                    if class == 0 {
                        dc[id] = table;
                    } else {
                        ac[id] = table;
                    }
                    s = &s[17 + total..];
                }
            }
            // already restart-marked (or a DRI of 0): leave it to the general transcoder
            0xDD => return None,
            // progressive, lossless, hierarchical, arithmetic: not ours
            0xC2 | 0xC3 | 0xC5..=0xCB | 0xCD..=0xCF => return None,
            0xDA => break (at - 1, len),
            0xD0..=0xD9 | 0x01 => return None,
            _ => {}
        }
        at += 1 + len;
    };
    let (w, h, comps) = frame?;
    let sos = data.get(sos_at + 4..sos_at + 2 + sos_len)?;
    let ns = usize::from(*sos.first()?);
    if ns != comps.len() || sos.len() != 1 + 2 * ns + 3 || sos[1 + 2 * ns..] != [0, 63, 0] {
        return None; // several scans, or not a sequential scan
    }
    // the scan's components in its order, each with its tables and blocks per MCU
    let mut plan = Vec::with_capacity(ns);
    for i in 0..ns {
        let (id, tables) = (sos[1 + 2 * i], sos[2 + 2 * i]);
        let c = comps.iter().find(|c| c.id == id)?;
        let d = dc.get(usize::from(tables >> 4))?.as_ref()?;
        let a = ac.get(usize::from(tables & 15))?.as_ref()?;
        plan.push((&**d, &**a, c.h * c.v));
    }
    let hmax = comps.iter().map(|c| c.h).max()?;
    let vmax = comps.iter().map(|c| c.v).max()?;
    let mcux = w.div_ceil(8 * hmax);
    let mcuy = h.div_ceil(8 * vmax);
    let interval = restart_interval(mcux);
    let interval16 = u16::try_from(interval).ok()?;

    // the entropy-coded data, unstuffed, up to the marker that ends it (EOI expected)
    let start = sos_at + 2 + sos_len;
    let mut bytes = Vec::with_capacity(data.len() - start + 8);
    let mut i = start;
    let tail = loop {
        let ff = i + memchr::memchr(0xFF, data.get(i..)?)?;
        bytes.extend_from_slice(&data[i..ff]);
        let mut j = ff + 1;
        while *data.get(j)? == 0xFF {
            j += 1; // fill bytes
        }
        match data[j] {
            0x00 => {
                bytes.push(0xFF);
                i = j + 1;
            }
            0xD9 => break ff,
            _ => return None, // a restart marker, another scan or a stray marker
        }
    };
    let end = bytes.len() as u64 * 8;
    bytes.extend_from_slice(&[0xFF; PAD]);
    let mut r = Bits {
        data: &bytes,
        next: 0,
        buf: 0,
        n: 0,
        end,
    };

    // one pass: the output written as the walk finds every interval's first blocks (the only
    // bits that change)
    let plan = Plan {
        comps: &plan,
        mcus: u64::from(mcux) * u64::from(mcuy),
        interval: u64::from(interval),
    };
    let mut out = Writer::new(data.len() + data.len() / 32 + 64);
    out.bytes(&data[..sos_at]);
    out.bytes(&[0xFF, 0xDD, 0x00, 0x04]);
    out.bytes(&interval16.to_be_bytes());
    out.bytes(&data[sos_at..start]);
    let mut emit = Emit {
        out,
        data: &bytes,
        span_from: 0,
        intervals: 0,
    };
    let end = plan.walk(&mut r, &mut emit)?;
    let mut out = emit.out;
    out.copy(&bytes, emit.span_from, end);
    out.align();
    out.bytes(&data[tail..]);
    Some(out.finish())
}

/// The output of [`insert_restarts`] as [`Plan::walk`] goes: the input's bits copied up to each
/// interval's first blocks, each interval after the first after a marker, and the first DC
/// difference of each component re-encoded against a predictor of 0.
struct Emit<'d> {
    out: Writer,
    /// The entropy-coded data, unstuffed.
    data: &'d [u8],
    /// The input bits from here on go to the output unchanged (as far as known yet).
    span_from: u64,
    /// Intervals begun.
    intervals: usize,
}

impl Emit<'_> {
    /// Write the output up to `f`, an interval's first block of a component (`scan_first`: the
    /// scan's first component, so a new interval), with its DC difference re-encoded. `None`
    /// when the table `dct` has no code for the new difference's category.
    #[inline(never)]
    fn first_block(&mut self, scan_first: bool, f: &FirstBlock, dct: &Huffman) -> Option<()> {
        if scan_first {
            if self.intervals > 0 {
                self.out.copy(self.data, self.span_from, f.start);
                self.span_from = f.start;
                self.out.align();
                self.out
                    .bytes(&[0xFF, 0xD0 + ((self.intervals - 1) % 8) as u8]);
            }
            self.intervals += 1;
        }
        if f.pred_before != 0 {
            // the DC difference against a predictor of 0, as a restart asks
            self.out.copy(self.data, self.span_from, f.start);
            let (cat, bits) = dc_bits(f.pred_after);
            let (code, len) = dct.encode[cat as usize];
            if len == 0 {
                return None; // the table has no code for this category
            }
            self.out.room(32);
            self.out.put(
                u64::from(code) << cat | u64::from(bits),
                u32::from(len) + cat,
            );
            self.span_from = f.dc_end;
        }
        Some(())
    }
}

/// MCUs per restart interval for an image `mcux` MCUs wide: the largest divisor of `mcux` not
/// above `mcux / 16`, so that each MCU row is a whole number of intervals ("bands", about sixteen
/// per row; measured best on ImageNet-sized photographs, where eight bands and one interval per
/// MCU were both slower) and a crop can be cut out of the entropy-coded data (see
/// [`crate::restart`]). An interval is at least two MCUs (a marker per MCU costs more decode time
/// than it saves); when `mcux` has no such divisor (a prime, say), one interval per row: crops
/// then skip rows only.
pub fn restart_interval(mcux: u32) -> u32 {
    let target = (mcux / 16).max(2);
    match (1..=target).rev().find(|k| mcux.is_multiple_of(*k)) {
        Some(1) | None => mcux.max(1),
        Some(k) => k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_symbol_entries_agree_with_one_symbol_at_a_time() {
        // JPEG's standard luminance AC table (Annex K.3): codes of 2 to 16 bits, EOB, ZRL
        let counts = [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7d];
        let mut symbols = vec![
            0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51,
            0x61, 0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1,
            0x15, 0x52, 0xd1, 0xf0,
        ];
        // the remaining 130 symbols: any run/size pairs not yet used (codes of 9..16 bits)
        for rs in 0..=255u8 {
            if symbols.len() < 162 && rs & 15 != 0 && rs & 15 <= 10 && !symbols.contains(&rs) {
                symbols.push(rs);
            }
        }
        // most prefixes hold at least one complete symbol
        let multi_steps = check_multi_table(&counts, &symbols);
        assert!(multi_steps > 3 * (1 << MULTI_BITS) / 2, "{multi_steps}");
        // a table with 2-bit codes for ZRL (16 zeros), EOB and a value: up to six ZRLs in one
        // prefix, more steps than a block has (the entry must stop before them)
        let counts = [0, 3, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let symbols = [0xF0, 0x00, 0x01, 0x11, 0x02, 0x21];
        let h = Huffman::new(&counts, &symbols).unwrap().with_multi();
        assert_eq!(
            h.multi[0],
            48 << 4 | 6,
            "three ZRLs (48 steps) fit, a fourth (64) not"
        );
        check_multi_table(&counts, &symbols);
    }

    /// Every [`Huffman::multi`] entry of the AC table `counts`/`symbols` against decoding one
    /// symbol at a time (the prefix followed by 1-bits, which make no complete code in these
    /// tables); how many entries held at least one symbol.
    fn check_multi_table(counts: &[u8], symbols: &[u8]) -> u32 {
        let h = Huffman::new(counts, symbols).unwrap().with_multi();
        let mut multi_steps = 0;
        for prefix in 0..1u32 << MULTI_BITS {
            for k0 in [1u32, 30, 60] {
                let v = (prefix << (32 - MULTI_BITS)) | ((1 << (32 - MULTI_BITS)) - 1);
                let mut bytes = v.to_be_bytes().to_vec();
                bytes.extend_from_slice(&[0xFF; PAD]);
                let bits = || Bits {
                    data: &bytes,
                    next: 0,
                    buf: 0,
                    n: 0,
                    end: 32,
                };
                let (mut a, mut b) = (bits(), bits());
                a.fill();
                b.fill();
                let got = h.ac_step(&mut a, k0);
                // one symbol at a time, as far as the multi entry claims to go
                let e = u32::from(h.multi[prefix as usize]);
                let want = if multi_fits(e, k0) {
                    multi_steps += 1;
                    let mut k = k0;
                    while b.pos() < u64::from(e & 15) && k < 64 {
                        k = ac_advance(k, h.skip_ac(&mut b).unwrap()).unwrap();
                    }
                    assert_eq!(b.pos(), u64::from(e & 15), "prefix {prefix:013b}");
                    Some(k)
                } else {
                    h.skip_ac(&mut b).and_then(|step| ac_advance(k0, step))
                };
                assert_eq!(got, want, "prefix {prefix:013b} from index {k0}");
                assert_eq!(a.pos(), b.pos(), "prefix {prefix:013b} from index {k0}");
            }
        }
        multi_steps
    }

    #[test]
    fn dc_bits_inverts_extend() {
        for v in -2047i32..=2047 {
            let (cat, bits) = dc_bits(v);
            let back = if cat == 0 {
                0
            } else if (bits as i32) < 1 << (cat - 1) {
                bits as i32 - (1 << cat) + 1
            } else {
                bits as i32
            };
            assert_eq!(back, v, "category {cat}");
            assert!(cat <= 11);
        }
    }

    #[test]
    fn writer_stuffs_and_pads() {
        let mut w = Writer::new(0);
        w.room(11);
        w.put(0xFF, 8);
        w.put(0b101, 3);
        w.align();
        assert_eq!(w.finish(), [0xFF, 0x00, 0b1011_1111]);
        // seven 0xFF bytes in one store, then one made of two puts' bits
        let mut w = Writer::new(0);
        w.room(72);
        w.put((1 << 56) - 1, 56);
        w.put(0b1111, 4);
        w.put(0b1110, 4);
        w.put(0b1111, 4);
        w.align();
        let mut want = [0xFF, 0x00].repeat(7);
        want.extend_from_slice(&[0xFE, 0xFF, 0x00]);
        assert_eq!(w.finish(), want);
    }

    #[test]
    fn copy_gives_the_bits_one_at_a_time_would() {
        // bytes with many 0xFF (stuffing) and every bit pattern around them
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<u8> = (0..300)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i % 5 == 0 { 0xFF } else { x as u8 }
            })
            .collect();
        // no room made ahead beyond what each call asks: the buffer grows as needed
        let writer = || Writer::new(0);
        for pending in [0u32, 1, 7, 8, 13, 31] {
            for (from, to) in [
                (0u64, 0u64),
                (3, 59),
                (0, 56),
                (5, 61),
                (17, 2000),
                (1, 2399),
            ] {
                let (mut fast, mut slow) = (writer(), writer());
                for w in [&mut fast, &mut slow] {
                    w.room(32);
                    w.put(0x5A5A_5A5A, pending);
                }
                fast.copy(&data, from, to);
                for bit in from..to {
                    slow.room(1);
                    slow.put(word_at(&data, bit) >> 63, 1);
                }
                fast.align();
                slow.align();
                let (fast, slow) = (fast.finish(), slow.finish());
                assert_eq!(fast, slow, "{pending} pending, bits {from}..{to}");
            }
        }
    }

    #[test]
    fn anything_else_is_refused_without_panicking() {
        assert!(insert_restarts(b"").is_none());
        assert!(insert_restarts(b"\xff\xd8").is_none());
        assert!(insert_restarts(b"\xff\xd8\xff\xc4\x00\x02").is_none());
        assert!(insert_restarts(b"\xff\xd8\xff\xc4\xff\xff").is_none());
    }
}
