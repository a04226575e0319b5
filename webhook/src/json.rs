//! One validating pass over an AdmissionReview body.
//!
//! The webhook decodes only what injection reads ([`crate::PodView`] and the request around
//! it). serde's derive skips every other field with `IgnoredAny`, which checks syntax only: not
//! the pairing of UTF-16 surrogate escapes, not that a number fits an f64, not the nesting
//! depth (each found by the fuzz target). So the narrow types here implement `Deserialize` with
//! [`narrow!`]: the fields they read are decoded, and every other field's value is checked in
//! full by [`Valid`] and dropped, in the same pass, allocating nothing. A body they accept is a
//! body a full JSON parse accepts.

use std::borrow::Cow;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Any JSON value, checked (strings unescaped, numbers parsed, depth counted) and dropped.
pub(crate) struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Checker)
    }
}

struct Checker;

impl<'de> Visitor<'de> for Checker {
    type Value = Valid;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_str<E>(self, _: &str) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_unit<E>(self) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Valid, A::Error> {
        while seq.next_element::<Valid>()?.is_some() {}
        Ok(Valid)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Valid, A::Error> {
        while map.next_entry::<Valid, Valid>()?.is_some() {}
        Ok(Valid)
    }
}

/// An object key: borrowed from the body unless it holds an escape.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
            fn visit_string<E>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// `Deserialize` for a struct read from a JSON object: each listed key decodes into its field
/// (left at `Default` when absent; a repeated key is an error, as with serde's derive), and
/// every other key's value is checked in full by [`Valid`] and dropped.
macro_rules! narrow {
    ($ty:ident { $($field:ident: $key:literal),+ $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct NarrowVisitor;
                impl<'de> serde::de::Visitor<'de> for NarrowVisitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a JSON object (", stringify!($ty), ")"))
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$ty, A::Error> {
                        let mut value = <$ty>::default();
                        let mut seen: u64 = 0;
                        while let Some(key) = map.next_key::<$crate::json::Key<'de>>()? {
                            let mut bit = 1_u64;
                            $(
                                if key.0 == $key {
                                    if seen & bit != 0 {
                                        return Err(serde::de::Error::duplicate_field($key));
                                    }
                                    seen |= bit;
                                    value.$field = map.next_value()?;
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
}
pub(crate) use narrow;

#[cfg(test)]
mod tests {
    #[derive(Debug, Default, PartialEq)]
    struct Sample {
        name: Option<String>,
        count: u32,
    }
    narrow!(Sample { name: "name", count: "count" });

    #[test]
    fn listed_fields_decode_and_the_rest_is_checked_in_full() {
        let sample: Sample =
            serde_json::from_str(r#"{"other": [1, {"a": "b"}], "name": "x", "count": 3}"#).expect("valid");
        assert_eq!(sample, Sample { name: Some("x".into()), count: 3 });
        assert_eq!(serde_json::from_str::<Sample>("{}").expect("empty"), Sample::default());
        for bad in [
            r#"{"other": "\udbff"}"#,                                           // a lone surrogate
            r#"{"other": 1e999}"#,                                              // out of f64 range
            &format!(r#"{{"other": {}{}}}"#, "[".repeat(200), "]".repeat(200)), // too deep
            r#"{"name": "x", "name": "y"}"#,                                    // a repeated field
            r#"{"other": tru}"#,
            r#"{"name": 1}"#,
        ] {
            assert!(serde_json::from_str::<Sample>(bad).is_err(), "{bad}");
        }
        // Escaped keys are still keys.
        let escaped: Sample = serde_json::from_str(r#"{"n\u0061me": "x"}"#).expect("escaped key");
        assert_eq!(escaped.name.as_deref(), Some("x"));
    }
}
