//! `tf.train.Example` decoding (the payload of most TFRecord files), with message types derived
//! by prost (no `protoc`, no build script).
//!
//! The types mirror `tensorflow/core/example/{example,feature}.proto`. `Features::feature` is a
//! [`BTreeMap`] so iteration order, and re-encoding, are deterministic.
//!
//! Hostile input: prost's decoding is bounded by the input length. Every length-delimited field
//! (a nested message, a `bytes` value, a packed list) is checked against the bytes remaining in
//! the buffer before anything is copied or reserved, so a length varint claiming more than the
//! input holds fails with a decode error instead of triggering a large allocation; packed lists
//! reserve at most one element per remaining input byte. Unknown fields are skipped under
//! prost's recursion limit.

use std::collections::BTreeMap;

use prost::Message;

/// `tf.train.Example`: one training example, a map of named features.
#[derive(Clone, PartialEq, Message)]
pub struct Example {
    /// The example's features.
    #[prost(message, optional, tag = "1")]
    pub features: Option<Features>,
}

/// `tf.train.Features`: named features.
#[derive(Clone, PartialEq, Message)]
pub struct Features {
    /// Features by name, in name order.
    #[prost(btree_map = "string, message", tag = "1")]
    pub feature: BTreeMap<String, Feature>,
}

/// `tf.train.Feature`: one list of bytes, floats or 64-bit integers.
#[derive(Clone, PartialEq, Message)]
pub struct Feature {
    /// Which list this feature holds (`None` for an empty feature).
    #[prost(oneof = "feature::Kind", tags = "1, 2, 3")]
    pub kind: Option<feature::Kind>,
}

/// Nested types of [`Feature`].
pub mod feature {
    /// The `kind` oneof of `tf.train.Feature`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        /// A list of byte strings.
        #[prost(message, tag = "1")]
        BytesList(super::BytesList),
        /// A list of 32-bit floats.
        #[prost(message, tag = "2")]
        FloatList(super::FloatList),
        /// A list of 64-bit signed integers.
        #[prost(message, tag = "3")]
        Int64List(super::Int64List),
    }
}

/// `tf.train.BytesList`.
#[derive(Clone, PartialEq, Message)]
pub struct BytesList {
    /// The values.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub value: Vec<Vec<u8>>,
}

/// `tf.train.FloatList` (packed on the wire; unpacked input is accepted too).
#[derive(Clone, PartialEq, Message)]
pub struct FloatList {
    /// The values.
    #[prost(float, repeated, packed = "true", tag = "1")]
    pub value: Vec<f32>,
}

/// `tf.train.Int64List` (packed on the wire; unpacked input is accepted too).
#[derive(Clone, PartialEq, Message)]
pub struct Int64List {
    /// The values.
    #[prost(int64, repeated, packed = "true", tag = "1")]
    pub value: Vec<i64>,
}

impl Feature {
    /// A feature holding a list of byte strings.
    pub fn bytes<I, B>(values: I) -> Self
    where
        I: IntoIterator<Item = B>,
        B: Into<Vec<u8>>,
    {
        Self {
            kind: Some(feature::Kind::BytesList(BytesList {
                value: values.into_iter().map(Into::into).collect(),
            })),
        }
    }

    /// A feature holding a list of floats.
    pub fn floats(values: impl Into<Vec<f32>>) -> Self {
        Self {
            kind: Some(feature::Kind::FloatList(FloatList {
                value: values.into(),
            })),
        }
    }

    /// A feature holding a list of 64-bit integers.
    pub fn int64s(values: impl Into<Vec<i64>>) -> Self {
        Self {
            kind: Some(feature::Kind::Int64List(Int64List {
                value: values.into(),
            })),
        }
    }
}

impl Example {
    /// An example with the given named features.
    pub fn from_features<I, K>(features: I) -> Self
    where
        I: IntoIterator<Item = (K, Feature)>,
        K: Into<String>,
    {
        Self {
            features: Some(Features {
                feature: features.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            }),
        }
    }

    /// The feature named `name`, if present.
    pub fn feature(&self, name: &str) -> Option<&Feature> {
        self.features.as_ref()?.feature.get(name)
    }
}

/// Errors from [`decode_example`].
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    /// The bytes are not a valid `tf.train.Example` protobuf encoding.
    #[error("invalid tf.train.Example ({len} bytes): {source}")]
    Decode {
        /// Length of the input.
        len: usize,
        /// prost's description of the problem.
        source: prost::DecodeError,
    },
}

/// Decodes a serialized `tf.train.Example`.
pub fn decode_example(bytes: &[u8]) -> Result<Example, ExampleError> {
    Example::decode(bytes).map_err(|source| ExampleError::Decode {
        len: bytes.len(),
        source,
    })
}

/// Encodes an `Example` (deterministically: features in name order). Used by tests and
/// fixtures.
pub fn encode_example(example: &Example) -> Vec<u8> {
    example.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_matches_hand_encoding() {
        // Example{features{feature{"a": Feature{int64_list{value: [1, 2]}}}}}, encoded by hand:
        // Int64List: 0a 02 01 02 (packed); Feature: 1a 04 <int64list>;
        // map entry: 0a 01 'a' 12 06 <feature>; Features: 0a 0b <entry>; Example: 0a 0d <features>.
        let hand = [
            0x0a, 0x0d, 0x0a, 0x0b, 0x0a, 0x01, b'a', 0x12, 0x06, 0x1a, 0x04, 0x0a, 0x02, 0x01,
            0x02,
        ];
        let ex = Example::from_features([("a", Feature::int64s(vec![1, 2]))]);
        assert_eq!(encode_example(&ex), hand);
        assert_eq!(decode_example(&hand).unwrap(), ex);
    }

    #[test]
    fn unpacked_int64_is_accepted() {
        // Int64List with two unpacked values: 08 01 08 02.
        let list = Int64List::decode(&[0x08, 0x01, 0x08, 0x02][..]).unwrap();
        assert_eq!(list.value, vec![1, 2]);
    }
}
