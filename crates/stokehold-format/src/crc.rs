//! CRC-32C helpers: the checksum of every record, of the meta block, of the index and of the whole
//! file.
//!
//! The whole-file checksum is an ordinary CRC-32C of the file's bytes, so any tool can check it. The
//! verifier computes it in the same single pass that checks each record, by combining the CRC of
//! each record with the running CRC of everything before it ([`combine`]); that avoids hashing every
//! byte twice.

/// CRC-32C (Castagnoli) of `data`, with the usual initial value and final xor.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continue a CRC-32C over more data: `append(crc32c(a), b) == crc32c(a ++ b)`.
#[inline]
pub fn append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The reflected CRC-32C polynomial.
const POLY: u32 = 0x82F6_3B78;

/// `a(x) * b(x) mod p(x)` in the reflected bit order. `a` must not be zero.
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `X2N[k] = x^(2^k) mod p(x)`.
const X2N: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 64 {
        t[k] = multmodp(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// `x^(n * 2^k) mod p(x)`.
fn x2nmodp(mut n: u64, mut k: usize) -> u32 {
    let mut p: u32 = 1 << 31; // x^0
    while n > 0 {
        if n & 1 != 0 {
            p = multmodp(X2N[k & 63], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// Given `crc1 = crc32c(a)` and `crc2 = crc32c(b)`, returns `crc32c(a ++ b)` where `len2 = b.len()`.
/// Costs O(log len2) carry-less multiplications, independent of the data.
pub fn combine(crc1: u32, crc2: u32, len2: u64) -> u32 {
    if len2 == 0 {
        return crc1;
    }
    multmodp(x2nmodp(len2, 3), crc1) ^ crc2
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_vector() {
        // The CRC-32C check value from RFC 3720.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    proptest! {
        #[test]
        fn combine_equals_crc_of_concatenation(a in proptest::collection::vec(any::<u8>(), 0..300),
                                               b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut ab = a.clone();
            ab.extend_from_slice(&b);
            prop_assert_eq!(combine(crc32c(&a), crc32c(&b), b.len() as u64), crc32c(&ab));
        }
    }

    #[test]
    fn combine_of_long_zero_run() {
        let zeros = vec![0u8; 1 << 20];
        assert_eq!(
            combine(crc32c(b"abc"), crc32c(&zeros), zeros.len() as u64),
            append(crc32c(b"abc"), &zeros)
        );
    }
}
