//! One validating pass over an AdmissionReview body.
//!
//! The webhook decodes only what injection reads ([`crate::PodView`] and the request around
//! it), with [`from_str`]: a JSON deserializer that checks every value it is asked to skip as a
//! full parse would (escapes and the pairing of UTF-16 surrogates, numbers in f64 range,
//! nesting depth, syntax), in the same pass and without allocating. serde_json's own skipping
//! checks syntax only, which the fuzz target showed three ways. The narrow types implement
//! `Deserialize` with [`narrow!`]: the fields they read are decoded, every other field is
//! skipped as [`Valid`]. A body [`from_str`] accepts is a body serde_json parses into a `Value`
//! (the tests below compare the two on generated texts). The answer goes back through
//! [`write`], with the same scan of strings.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};

pub mod write;

/// The nesting serde_json allows: 127 arrays or objects inside each other.
const MAX_DEPTH: usize = 127;

/// Decodes `T` from the JSON text `text`, checking all of it.
pub fn from_str<'de, T: Deserialize<'de>>(text: &'de str) -> Result<T, Error> {
    let mut reader = Reader { text, bytes: text.as_bytes(), pos: 0, depth: 0 };
    let value = T::deserialize(&mut reader).map_err(|error| reader.locate(error))?;
    match reader.peek() {
        None => Ok(value),
        Some(_) => Err(reader.locate(Error::new("trailing characters"))),
    }
}

/// Why a text is not the JSON expected, and where (as serde_json says it).
#[derive(Debug)]
pub struct Error {
    message: String,
    at: Option<(usize, usize)>,
}

impl Error {
    fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), at: None }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, column)) => write!(f, "{} at line {line} column {column}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self::new(message.to_string())
    }
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// A position in a JSON text, read forwards.
struct Reader<'de> {
    text: &'de str,
    bytes: &'de [u8],
    pos: usize,
    depth: usize,
}

impl<'de> Reader<'de> {
    /// The error, placed at the current position unless it has a place.
    #[cold]
    fn locate(&self, mut error: Error) -> Error {
        if error.at.is_none() {
            let before = self.bytes.get(..self.pos).unwrap_or(self.bytes);
            let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
            let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
            error.at = Some((line, column));
        }
        error
    }

    /// The next byte after whitespace, not consumed.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        while let Some(&byte) = self.bytes.get(self.pos) {
            if !matches!(byte, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(byte);
            }
            self.pos += 1;
        }
        None
    }

    /// The next byte after whitespace, which must be there.
    #[inline]
    fn peek_value(&mut self) -> Result<u8> {
        self.peek().ok_or_else(|| Error::new("EOF while parsing a value"))
    }

    /// Consumes `byte`, which must come next after whitespace.
    #[inline]
    fn expect(&mut self, byte: u8, what: &str) -> Result<()> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(Error::new(format!("expected {what}")))
        }
    }

    /// Consumes the literal `word` (`true`, `false`, `null`).
    fn literal(&mut self, word: &str) -> Result<()> {
        if self.bytes.get(self.pos..self.pos + word.len()) == Some(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(Error::new("expected value"))
        }
    }

    /// Enters an array or object (its opening byte next), counting the depth.
    fn enter(&mut self) -> Result<()> {
        if self.depth == MAX_DEPTH {
            return Err(Error::new("recursion limit exceeded"));
        }
        self.depth += 1;
        self.pos += 1;
        Ok(())
    }

    /// Leaves the array or object that `close` ends.
    fn leave(&mut self, close: u8) -> Result<()> {
        self.depth = self.depth.saturating_sub(1);
        match self.peek() {
            Some(byte) if byte == close => {
                self.pos += 1;
                Ok(())
            }
            Some(b',') => Err(Error::new("trailing comma")),
            Some(_) => Err(Error::new(if close == b']' { "expected `,` or `]`" } else { "expected `,` or `}`" })),
            None => Err(Error::new("EOF while parsing a list or an object")),
        }
    }

    /// A string (its opening quote next): borrowed from the text unless it holds an escape.
    fn string(&mut self) -> Result<Cow<'de, str>> {
        self.pos += 1;
        let start = self.pos;
        self.pos = find_special(self.bytes, self.pos);
        if self.bytes.get(self.pos) == Some(&b'"') {
            let text = self.text.get(start..self.pos).ok_or_else(|| Error::new("invalid string"))?;
            self.pos += 1;
            return Ok(Cow::Borrowed(text));
        }
        let mut owned = String::from(self.text.get(start..self.pos).unwrap_or_default());
        self.rest_of_string(Some(&mut owned))?;
        Ok(Cow::Owned(owned))
    }

    /// Checks a string (its opening quote next) and steps over it.
    #[inline]
    fn skip_string(&mut self) -> Result<()> {
        self.string_length().map(drop)
    }

    /// Checks a string (its opening quote next), steps over it, and says how many bytes it
    /// holds unescaped, copying none.
    #[inline]
    fn string_length(&mut self) -> Result<usize> {
        let start = self.pos + 1;
        self.pos = find_special(self.bytes, start);
        let plain = self.pos - start;
        if self.bytes.get(self.pos) == Some(&b'"') {
            self.pos += 1;
            return Ok(plain);
        }
        Ok(plain + self.rest_of_string(None)?)
    }

    /// The rest of a string from the current position to its closing quote, unescaped into
    /// `out` when given; its unescaped length in bytes.
    fn rest_of_string(&mut self, mut out: Option<&mut String>) -> Result<usize> {
        let mut length = 0;
        loop {
            let start = self.pos;
            self.pos = find_special(self.bytes, self.pos);
            length += self.pos - start;
            if let Some(out) = out.as_deref_mut() {
                out.push_str(self.text.get(start..self.pos).ok_or_else(|| Error::new("invalid string"))?);
            }
            match self.bytes.get(self.pos) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(length);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = self.escape()?;
                    length += c.len_utf8();
                    if let Some(out) = out.as_deref_mut() {
                        out.push(c);
                    }
                }
                Some(_) => return Err(Error::new("control character (\\u0000-\\u001F) found while parsing a string")),
                None => return Err(Error::new("EOF while parsing a string")),
            }
        }
    }

    /// The character an escape stands for (the backslash read).
    fn escape(&mut self) -> Result<char> {
        let byte = *self.bytes.get(self.pos).ok_or_else(|| Error::new("EOF while parsing a string"))?;
        self.pos += 1;
        Ok(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                let code = match unit {
                    0xD800..=0xDBFF => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(Error::new("lone leading surrogate in hex escape"));
                        }
                        self.pos += 2;
                        let low = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(Error::new("lone leading surrogate in hex escape"));
                        }
                        0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err(Error::new("lone trailing surrogate in hex escape")),
                    unit => u32::from(unit),
                };
                char::from_u32(code).ok_or_else(|| Error::new("invalid unicode code point"))?
            }
            _ => return Err(Error::new("invalid escape")),
        })
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u16> {
        let digits = self.bytes.get(self.pos..self.pos + 4).ok_or_else(|| Error::new("EOF while parsing a string"))?;
        let mut unit = 0_u16;
        for &digit in digits {
            let value = char::from(digit).to_digit(16).ok_or_else(|| Error::new("invalid escape"))?;
            unit = unit << 4 | value as u16;
        }
        self.pos += 4;
        Ok(unit)
    }

    /// A number (its first byte next), checked as serde_json checks it: its grammar, and that
    /// it fits an f64.
    fn number(&mut self) -> Result<Number> {
        let start = self.pos;
        let length = self.bytes.get(start..).unwrap_or_default().iter().take_while(|b| is_number_byte(**b)).count();
        self.pos += length;
        let text = self.text.get(start..self.pos).unwrap_or_default();
        // The common case, a small integer, is read here; the rest (fractions, exponents, long
        // integers, and whatever is not a number) by serde_json, for the same verdicts.
        let digits = text.strip_prefix('-').unwrap_or(text);
        let simple = !digits.is_empty()
            && digits.len() <= 18
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if simple {
            if let (Ok(n), true) = (text.parse::<i64>(), text.starts_with('-')) {
                return Ok(Number::Negative(n));
            }
            if let Ok(n) = text.parse::<u64>() {
                return Ok(Number::Positive(n));
            }
        }
        match serde_json::from_str::<serde_json::Number>(text) {
            Ok(n) => Ok(match (n.as_u64(), n.as_i64()) {
                (Some(n), _) => Number::Positive(n),
                (None, Some(n)) => Number::Negative(n),
                (None, None) => Number::Float(n.as_f64().unwrap_or_default()),
            }),
            Err(error) if error.is_eof() || text.is_empty() => Err(Error::new("invalid number")),
            Err(error) => Err(Error::new(strip_position(&error))),
        }
    }

    /// Checks one value of any kind and steps over it.
    fn skip(&mut self) -> Result<()> {
        match self.peek_value()? {
            b'"' => self.skip_string(),
            b'{' => {
                self.enter()?;
                if self.peek() != Some(b'}') {
                    loop {
                        if self.peek() != Some(b'"') {
                            return Err(Error::new("key must be a string"));
                        }
                        self.skip_string()?;
                        self.expect(b':', "`:`")?;
                        self.skip()?;
                        if self.peek() != Some(b',') {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                self.leave(b'}')
            }
            b'[' => {
                self.enter()?;
                if self.peek() != Some(b']') {
                    loop {
                        self.skip()?;
                        if self.peek() != Some(b',') {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                self.leave(b']')
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            _ => Err(Error::new("expected value")),
        }
    }
}

/// A number as serde's visitors take it.
enum Number {
    Positive(u64),
    Negative(i64),
    Float(f64),
}

fn is_number_byte(byte: u8) -> bool {
    matches!(byte, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

/// serde_json's message without its position (the position given is the whole text's).
fn strip_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    }
}

/// The index of the first byte at or after `from` that ends a plain run of string bytes: a
/// quote, a backslash or a control character (`bytes.len()` when there is none). Eight bytes at
/// a time: the lowest flagged byte of a word is always a true match.
#[inline]
fn find_special(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(chunk).map(u64::from_le_bytes) else { break };
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let quote = word ^ (ONES * u64::from(b'"'));
        let quote = quote.wrapping_sub(ONES) & !quote;
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let backslash = backslash.wrapping_sub(ONES) & !backslash;
        let found = (control | quote | backslash) & HIGH;
        if found != 0 {
            return i + found.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    while let Some(&byte) = bytes.get(i) {
        if byte == b'"' || byte == b'\\' || byte < 0x20 {
            break;
        }
        i += 1;
    }
    i
}

impl<'de> Deserializer<'de> for &mut Reader<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.peek_value()? {
            b'"' => match self.string()? {
                Cow::Borrowed(text) => visitor.visit_borrowed_str(text),
                Cow::Owned(text) => visitor.visit_string(text),
            },
            b'{' => {
                self.enter()?;
                let value = visitor.visit_map(Entries { reader: self, first: true })?;
                self.leave(b'}')?;
                Ok(value)
            }
            b'[' => {
                self.enter()?;
                let value = visitor.visit_seq(Entries { reader: self, first: true })?;
                self.leave(b']')?;
                Ok(value)
            }
            b't' => self.literal("true").and_then(|()| visitor.visit_bool(true)),
            b'f' => self.literal("false").and_then(|()| visitor.visit_bool(false)),
            b'n' => self.literal("null").and_then(|()| visitor.visit_unit()),
            b'-' | b'0'..=b'9' => match self.number()? {
                Number::Positive(n) => visitor.visit_u64(n),
                Number::Negative(n) => visitor.visit_i64(n),
                Number::Float(n) => visitor.visit_f64(n),
            },
            _ => Err(Error::new("expected value")),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.peek() == Some(b'n') {
            self.literal("null")?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.skip()?;
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value> {
        // A string's length, read without copying it (see [`Length`]).
        if name == LENGTH && self.peek() == Some(b'"') {
            let length = self.string_length()?;
            return visitor.visit_u64(u64::try_from(length).unwrap_or(u64::MAX));
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        // Unit variants, written as strings (an operation, say).
        if self.peek_value()? != b'"' {
            return Err(Error::new("expected a string"));
        }
        let variant = self.string()?;
        visitor.visit_enum(variant.as_ref().into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier
    }
}

/// The entries of an array or an object being read.
struct Entries<'a, 'de> {
    reader: &'a mut Reader<'de>,
    first: bool,
}

impl Entries<'_, '_> {
    /// Whether another entry follows (the comma before it consumed).
    fn more(&mut self, close: u8) -> Result<bool> {
        let next = self.reader.peek();
        if next == Some(close) {
            return Ok(false);
        }
        if std::mem::take(&mut self.first) {
            return Ok(next.is_some());
        }
        if next == Some(b',') {
            self.reader.pos += 1;
            if self.reader.peek() == Some(close) {
                return Err(Error::new("trailing comma"));
            }
            Ok(true)
        } else {
            // Not consumed: `leave` names what is wrong.
            Ok(false)
        }
    }
}

impl<'de> SeqAccess<'de> for Entries<'_, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if !self.more(b']')? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }
}

impl<'de> MapAccess<'de> for Entries<'_, 'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if !self.more(b'}')? {
            return Ok(None);
        }
        if self.reader.peek() != Some(b'"') {
            return Err(Error::new("key must be a string"));
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        self.reader.expect(b':', "`:`")?;
        seed.deserialize(&mut *self.reader)
    }
}

/// Any JSON value, checked in full and dropped. Read by [`from_str`], it is skipped without
/// allocating; read by another deserializer (from a `serde_json::Value`, say) it is that
/// deserializer's way of ignoring a value.
pub struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_ignored_any(de::IgnoredAny).map(|_| Valid)
    }
}

/// The name by which [`from_str`]'s reader knows a [`Length`].
const LENGTH: &str = "$watcher::json::Length";

/// The length in bytes of a string value (unescaped), or 0 for `null`. Read by [`from_str`],
/// the string is checked and stepped over, never copied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Length(pub usize);

impl<'de> Deserialize<'de> for Length {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LengthVisitor;
        impl<'de> Visitor<'de> for LengthVisitor {
            type Value = Length;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_u64<E: de::Error>(self, length: u64) -> Result<Length, E> {
                Ok(Length(usize::try_from(length).unwrap_or(usize::MAX)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Length, E> {
                Ok(Length(text.len()))
            }
            fn visit_unit<E>(self) -> Result<Length, E> {
                Ok(Length(0))
            }
            fn visit_none<E>(self) -> Result<Length, E> {
                Ok(Length(0))
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Length, D::Error> {
                deserializer.deserialize_any(self)
            }
        }
        deserializer.deserialize_newtype_struct(LENGTH, LengthVisitor)
    }
}

/// A string (an object key, say): borrowed from the body unless it holds an escape.
#[derive(Debug, Default)]
pub struct Text<'de>(pub Cow<'de, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
            fn visit_string<E>(self, text: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// `Deserialize` for a struct read from a JSON object: each listed key decodes into its field
/// (left at `Default` when absent; a repeated key is an error, as with serde's derive), with
/// the function after `=>` when one is named, and every other key's value is skipped as
/// [`Valid`]. A struct that borrows from the body names its lifetime `'de`.
#[macro_export]
macro_rules! narrow {
    ($ty:ident $(<$de:lifetime>)? { $($field:ident: $key:literal $(=> $read:path)?),+ $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $ty $(<$de>)? {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct NarrowVisitor;
                impl<'de> serde::de::Visitor<'de> for NarrowVisitor {
                    type Value = $ty $(<$de>)?;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a JSON object (", stringify!($ty), ")"))
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                        let mut value = <$ty $(<$de>)?>::default();
                        let mut seen: u64 = 0;
                        while let Some(key) = map.next_key::<$crate::json::Text<'de>>()? {
                            let mut bit = 1_u64;
                            $(
                                if *key == *$key {
                                    if seen & bit != 0 {
                                        return Err(serde::de::Error::duplicate_field($key));
                                    }
                                    seen |= bit;
                                    value.$field = $crate::narrow!(@read map $($read)?);
                                    continue;
                                }
                                bit <<= 1;
                            )+
                            let _ = bit;
                            map.next_value::<$crate::json::Valid>()?;
                        }
                        Ok(value)
                    }
                }
                deserializer.deserialize_map(NarrowVisitor)
            }
        }
    };
    (@read $map:ident) => { $map.next_value()? };
    (@read $map:ident $read:path) => { $read(&mut $map)? };
}
pub use narrow;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Valid, from_str};

    #[derive(Debug, Default, PartialEq)]
    struct Sample {
        name: Option<String>,
        count: u32,
    }
    narrow!(Sample { name: "name", count: "count" });

    /// A string's length, read without copying it, is serde_json's unescaped length.
    #[test]
    fn lengths_agree_with_serde() {
        for text in [r#""plain""#, r#""a\"b\u00e9\ud83d\ude00\n""#, "null", r#""""#] {
            let ours: super::Length = from_str(text).expect("valid");
            let theirs: super::Length = serde_json::from_str(text).expect("valid");
            assert_eq!(ours, theirs, "{text}");
        }
        assert_eq!(from_str::<super::Length>(r#""a\"b""#).expect("valid").0, 3);
        assert!(from_str::<super::Length>(r#""\x""#).is_err(), "checked as it is skipped");
    }

    #[test]
    fn listed_fields_decode_and_the_rest_is_checked_in_full() {
        let sample: Sample = from_str(r#"{"other": [1, {"a": "b"}], "name": "x", "count": 3}"#).expect("valid");
        assert_eq!(sample, Sample { name: Some("x".into()), count: 3 });
        assert_eq!(from_str::<Sample>(" {} ").expect("empty"), Sample::default());
        assert_eq!(from_str::<Sample>(r#"{"name": null}"#).expect("null"), Sample::default());
        for bad in [
            r#"{"other": "\udbff"}"#,                                           // a lone surrogate
            r#"{"other": 1e999}"#,                                              // out of f64 range
            &format!(r#"{{"other": {}{}}}"#, "[".repeat(200), "]".repeat(200)), // too deep
            r#"{"name": "x", "name": "y"}"#,                                    // a repeated field
            r#"{"other": tru}"#,
            r#"{"name": 1}"#,
            r#"{"count": -1}"#,
            r#"{"name": "x"} {}"#,
            r#"[]"#,
        ] {
            assert!(from_str::<Sample>(bad).is_err(), "{bad}");
        }
        // Escaped keys are still keys, and escaped strings are unescaped.
        let escaped: Sample = from_str(r#"{"n\u0061me": "a\"b\\c\/\n\ud83d\ude00"}"#).expect("escaped");
        assert_eq!(escaped.name.as_deref(), Some("a\"b\\c/\n😀"));
    }

    #[test]
    fn errors_say_what_and_where() {
        let text = "{\n  \"other\": \"\\udbff\"}";
        let error = from_str::<Sample>(text).expect_err("lone surrogate");
        // The column is where reading stopped, counted from 1, as serde_json counts.
        assert_eq!(error.to_string(), "lone leading surrogate in hex escape at line 2 column 19");
        let error = from_str::<Sample>(r#"{"name": 1}"#).expect_err("wrong type");
        assert!(error.to_string().starts_with("invalid type: integer `1`, expected a string"), "{error}");
    }

    /// Whether serde_json parses `text` into a `Value`, the reference every verdict is held to.
    fn serde_json_accepts(text: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(text).is_ok()
    }

    #[test]
    fn accepts_what_serde_json_accepts_and_nothing_else() {
        let deepest_allowed = format!("{}{}", "[".repeat(127), "]".repeat(127));
        let one_too_deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        let deep_objects = format!("{}1{}", r#"{"a":"#.repeat(127), "}".repeat(127));
        let valid = [
            "0",
            "-0",
            "1",
            "-1",
            "0.5",
            "-0.5e-3",
            "1E+2",
            "1e-400",
            "5e-324",
            "1.7976931348623157e308",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "123456789012345678901234567890",
            r#""""#,
            r#""\ud83d\ude00""#,
            r#""\u0000\b\f\n\r\t\/\\\"""#,
            "\"\u{7f}é😀\"",
            "true",
            "false",
            "null",
            "[]",
            "{}",
            " [ 1 , { \"a\" : [ ] } ] ",
            "\t\r\n{}\n",
            &deepest_allowed,
            &deep_objects,
        ];
        for text in valid {
            assert!(serde_json_accepts(text), "serde_json accepts {text}");
            assert!(from_str::<Valid>(text).is_ok(), "accepted: {text}");
        }
        let invalid = [
            "",
            " ",
            "01",
            "-01",
            "1.",
            ".5",
            "-",
            "+1",
            "1e",
            "1e+",
            "1.e5",
            "0x10",
            "1e999",
            "-1e999",
            &"9".repeat(400),
            "NaN",
            "Infinity",
            "tru",
            "nul",
            "falsey",
            "[1,]",
            "[,1]",
            "[1 2]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{1:1}",
            "{\"a\":}",
            "[",
            "]",
            "{",
            "\"abc",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\u12g4\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\ud800\\u0041\"",
            "\"\\ud800\\n\"",
            "\"a\u{1}\"",
            "\"\n\"",
            "[] []",
            "\u{feff}{}",
            "[1-2]",
            "[1true]",
            &one_too_deep,
        ];
        for text in invalid {
            assert!(!serde_json_accepts(text), "serde_json rejects {text:?}");
            assert!(from_str::<Valid>(text).is_err(), "rejected: {text:?}");
        }
    }

    /// Texts of JSON's own characters, most of them broken somewhere.
    fn json_like() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            Just("{".to_owned()),
            Just("}".to_owned()),
            Just("[".to_owned()),
            Just("]".to_owned()),
            Just(",".to_owned()),
            Just(":".to_owned()),
            Just("\"".to_owned()),
            Just("\"k\":".to_owned()),
            Just("\\".to_owned()),
            Just("\\u".to_owned()),
            Just("d83d".to_owned()),
            Just("de00".to_owned()),
            Just("true".to_owned()),
            Just("null".to_owned()),
            Just(" ".to_owned()),
            "[-+.eE0-9]{1,6}",
            "[a-z\u{1}\n\u{e9}]{1,3}",
        ];
        prop::collection::vec(token, 0..24).prop_map(|tokens| tokens.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn agrees_with_serde_json(text in json_like()) {
            prop_assert_eq!(from_str::<Valid>(&text).is_ok(), serde_json_accepts(&text), "{}", text);
        }

        #[test]
        fn agrees_with_serde_json_on_generated_json(value in generated_json()) {
            let text = value.to_string();
            prop_assert!(from_str::<Valid>(&text).is_ok(), "{}", text);
            let pretty = serde_json::to_string_pretty(&value).expect("serialises");
            prop_assert!(from_str::<Valid>(&pretty).is_ok(), "{}", pretty);
        }
    }

    /// Any JSON value, a few levels deep.
    pub(super) fn generated_json() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }
}
