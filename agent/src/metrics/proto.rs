//! Protocol buffers' wire format, written straight into a buffer: the few field types the
//! protobuf exposition (`io.prometheus.client`) and remote write (`prometheus.WriteRequest`)
//! use. A nested message's length is written before it once it is known.

/// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH: u32 = 2;

/// `value` as a varint.
pub(crate) fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from((field << 3) | wire));
}

/// A `uint64`, `uint32` or enum field; not written at 0, its default (as prost writes).
pub(crate) fn uint(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        always(out, field, value);
    }
}

/// A varint field written even at 0: a member of a `oneof`, whose presence says which it is.
pub(crate) fn always(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, VARINT);
    varint(out, value);
}

/// An `int64` field (an `int32` that is not negative: protobuf writes a negative one in ten
/// bytes, as this does); not written at 0.
pub(crate) fn int(out: &mut Vec<u8>, field: u32, value: i64) {
    uint(out, field, value as u64);
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// A `sint32` or `sint64` field; not written at 0.
pub(crate) fn sint(out: &mut Vec<u8>, field: u32, value: i64) {
    uint(out, field, zigzag(value));
}

/// A `double` field; not written at 0.
pub(crate) fn double(out: &mut Vec<u8>, field: u32, value: f64) {
    if value.to_bits() == 0 {
        return;
    }
    key(out, field, FIXED64);
    out.extend_from_slice(&value.to_le_bytes());
}

/// A `string` field.
pub(crate) fn string(out: &mut Vec<u8>, field: u32, value: &str) {
    key(out, field, LENGTH);
    varint(out, value.len() as u64);
    out.extend_from_slice(value.as_bytes());
}

/// A `string` field of `parts` one after the other.
pub(crate) fn strings(out: &mut Vec<u8>, field: u32, parts: &[&str]) {
    key(out, field, LENGTH);
    varint(out, parts.iter().map(|p| p.len() as u64).sum());
    parts.iter().for_each(|p| out.extend_from_slice(p.as_bytes()));
}

/// A packed `repeated sint64` field (proto3's default for repeated numbers).
pub(crate) fn packed_sints(out: &mut Vec<u8>, field: u32, values: &[i64]) {
    if values.is_empty() {
        return;
    }
    message(out, field, |out| values.iter().for_each(|v| varint(out, zigzag(*v))));
}

/// A message field: `write` writes its fields, then its length is put before them.
pub(crate) fn message(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, LENGTH);
    delimited(out, write);
}

/// What `write` writes, its length before it.
pub(crate) fn delimited(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    // One byte holds the length of most messages; a longer length moves what follows.
    out.push(0);
    write(out);
    put_length(out, at);
}

/// Puts the length of what follows `at`, a byte left for it, in its place.
pub(crate) fn put_length(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(4);
        varint(&mut prefix, len as u64);
        out.splice(at..=at, prefix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_zigzag_and_lengths_are_as_protobuf_writes_them() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        assert_eq!([zigzag(0), zigzag(-1), zigzag(1), zigzag(-2)], [0, 1, 2, 3]);
        assert_eq!(zigzag(i64::MIN), u64::MAX);
        let mut long = Vec::new();
        message(&mut long, 1, |out| string(out, 2, &"x".repeat(200)));
        // key 1/LENGTH, length 203 as two bytes, key 2/LENGTH, length 200 as two bytes.
        assert_eq!(long[..6], [0x0a, 0xcb, 0x01, 0x12, 0xc8, 0x01]);
        assert_eq!(long.len(), 3 + 203);
    }
}
