//! The one-pass restart-marker rewrite as it was before issue #50 made it faster (commit
//! b58cc77, `crates/stokehold-ops/src/rst_insert.rs`, its unit tests left out), kept as the
//! reference that `rst_equivalence` holds the faster one to: the same output, byte for byte, or
//! the same refusal, on every input. Not to be changed: it is the record of what the output was.
#![allow(dead_code, clippy::all, missing_debug_implementations)]

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
    /// them all and they stay inside the block; else one by [`Huffman::skip_ac`]. At most 26 bits.
    #[inline(always)]
    fn skip_ac_run(&self, r: &mut Bits<'_>, k: u32) -> Option<u32> {
        let e = u32::from(self.multi[(r.peek16() >> (16 - MULTI_BITS)) as usize]);
        if multi_fits(e, k) {
            r.skip(e & 15);
            return Some(k + (e >> 4));
        }
        ac_advance(k, self.skip_ac(r)?)
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
    /// mispredictions of testing whether one is due.
    #[inline(always)]
    fn fill(&mut self) {
        let w = match self.data.get(self.next..self.next + 8) {
            Some(b) => u64::from_be_bytes(b.try_into().unwrap_or([0xFF; 8])),
            None => word_at(self.data, self.next as u64 * 8),
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

/// A writer of entropy-coded bits that stuffs a 0x00 after every 0xFF byte.
struct Writer {
    out: Vec<u8>,
    /// The last `n` bits of `acc` are pending (`n` < 32 between calls).
    acc: u64,
    n: u32,
}

impl Writer {
    /// Append the low `n` (0..=32) bits of `v`.
    #[inline(always)]
    fn put(&mut self, v: u64, n: u32) {
        self.acc = (self.acc << n) | (v & ((1u64 << n) - 1));
        self.n += n;
        if self.n >= 32 {
            self.n -= 32;
            let word = (self.acc >> self.n) as u32;
            // no 0xFF byte in the word (the usual case): four bytes at once
            let inv = !word;
            if inv.wrapping_sub(0x0101_0101) & !inv & 0x8080_8080 == 0 {
                self.out.extend_from_slice(&word.to_be_bytes());
            } else {
                for byte in word.to_be_bytes() {
                    self.out.push(byte);
                    if byte == 0xFF {
                        self.out.push(0);
                    }
                }
            }
        }
    }

    /// Copy bits `from..to` of `data` as they are: seven bytes per step (the spans between
    /// intervals' first blocks are most of a file), the last bits through [`Writer::put`].
    #[inline(always)]
    fn copy(&mut self, data: &[u8], mut from: u64, to: u64) {
        // whole pending bytes out first: then fewer than 8 bits wait, and 56 more fit in `acc`
        self.flush();
        let (mut acc, n) = (self.acc, self.n);
        while from + 56 <= to {
            acc = (acc << 56) | (word_at(data, from) >> 8);
            // the oldest 56 of the n + 56 pending bits; the newest n stay pending
            let bytes = (acc >> n) & ((1 << 56) - 1);
            // no 0xFF among the seven bytes (the top byte of `bytes` is 0, so never matches)
            let inv = !bytes;
            let word = (bytes << 8).to_be_bytes();
            if inv.wrapping_sub(0x0101_0101_0101_0101) & !inv & 0x8080_8080_8080_8080 == 0 {
                self.out.extend_from_slice(&word[..7]);
            } else {
                for &byte in &word[..7] {
                    self.out.push(byte);
                    if byte == 0xFF {
                        self.out.push(0);
                    }
                }
            }
            from += 56;
        }
        self.acc = acc;
        while from < to {
            let k = (to - from).min(32) as u32;
            self.put(word_at(data, from) >> (64 - k), k);
            from += u64::from(k);
        }
    }

    /// Write out every whole pending byte (fewer than 8 bits stay pending).
    #[inline(always)]
    fn flush(&mut self) {
        while self.n >= 8 {
            self.n -= 8;
            let byte = (self.acc >> self.n) as u8;
            self.out.push(byte);
            if byte == 0xFF {
                self.out.push(0);
            }
        }
    }

    /// Pad the last byte with 1-bits, as the standard asks before a marker, and write out every
    /// pending byte.
    fn align(&mut self) {
        let pad = (8 - self.n % 8) % 8;
        self.acc = (self.acc << pad) | ((1u64 << pad) - 1);
        self.n += pad;
        self.flush();
    }
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
    /// Walk every block of the scan, noting each interval's first blocks in `firsts` (the
    /// components of one interval together, in scan order); the bit position where the scan's
    /// blocks end. `None` for damaged data or data that ends inside a block.
    ///
    /// A function of its own so that the reader's state stays in registers.
    fn walk(&self, r: &mut Bits<'_>, firsts: &mut Vec<FirstBlock>) -> Option<u64> {
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
                    firsts.push(FirstBlock {
                        start,
                        dc_end: b.pos(),
                        pred_before,
                        pred_after: pred[c],
                    });
                }
                // AC: only where the block's bits end. The first symbol shares the DC's
                // refill (at most 27 + 26 bits), then two symbols per refill (at most
                // 2 x 26 bits; a refill leaves at least 56).
                let mut k = act.skip_ac_run(&mut b, 1)?;
                while k < 64 {
                    b.fill();
                    k = act.skip_ac_run(&mut b, k)?;
                    if k < 64 {
                        k = act.skip_ac_run(&mut b, k)?;
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
    let mut r = Bits {
        data: &bytes,
        next: 0,
        buf: 0,
        n: 0,
        end,
    };

    // first where every interval's first blocks lie (the only bits that change), then the output
    let plan = Plan {
        comps: &plan,
        mcus: u64::from(mcux) * u64::from(mcuy),
        interval: u64::from(interval),
    };
    let mut firsts = Vec::with_capacity(mcuy as usize * ns + ns);
    let end = plan.walk(&mut r, &mut firsts)?;

    let mut out = Writer {
        out: Vec::with_capacity(data.len() + data.len() / 32 + 64),
        acc: 0,
        n: 0,
    };
    out.out.extend_from_slice(&data[..sos_at]);
    out.out.extend_from_slice(&[0xFF, 0xDD, 0x00, 0x04]);
    out.out.extend_from_slice(&interval16.to_be_bytes());
    out.out.extend_from_slice(&data[sos_at..start]);
    // the input bits from `span_from` on go to the output unchanged
    let mut span_from = 0u64;
    for (i, first) in firsts.chunks(ns).enumerate() {
        if i > 0 {
            out.copy(&bytes, span_from, first[0].start);
            span_from = first[0].start;
            out.align();
            out.out
                .extend_from_slice(&[0xFF, 0xD0 + ((i - 1) % 8) as u8]);
        }
        for (f, &(dct, _, _)) in first.iter().zip(plan.comps) {
            if f.pred_before != 0 {
                // the DC difference against a predictor of 0, as a restart asks
                out.copy(&bytes, span_from, f.start);
                let (cat, bits) = dc_bits(f.pred_after);
                let (code, len) = dct.encode[cat as usize];
                if len == 0 {
                    return None; // the table has no code for this category
                }
                out.put(u64::from(code), u32::from(len));
                out.put(u64::from(bits), cat);
                span_from = f.dc_end;
            }
        }
    }
    out.copy(&bytes, span_from, end);
    out.align();
    let mut out = out.out;
    out.extend_from_slice(&data[tail..]);
    Some(out)
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
