//! JSON written byte for byte as serde_json's compact writer writes it, strings scanned eight
//! bytes at a time for what must be escaped ([`find_special`], the reader's own scan) where
//! serde_json looks at each byte: the webhook's answer, whose patch carries the sidecars'
//! containers and the pod's annotations, is mostly strings.

use std::io::Write as _;

use json_patch::PatchOperation;
use serde_json::Value;

use super::find_special;

/// Appends `text` as a JSON string.
pub fn string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    loop {
        let at = find_special(bytes, start);
        out.extend_from_slice(bytes.get(start..at).unwrap_or_default());
        let Some(&byte) = bytes.get(at) else { break };
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            control => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let digit = |n: u8| HEX.get(usize::from(n & 0xf)).copied().unwrap_or(b'0');
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', digit(control >> 4), digit(control)]);
            }
        }
        start = at + 1;
    }
    out.push(b'"');
}

/// Appends `value`.
pub fn value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Writing to a Vec cannot fail; serde_json's Display is its serialiser's text.
        Value::Number(number) => drop(write!(out, "{number}")),
        Value::String(text) => string(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                self::value(out, item);
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            out.push(b'{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, key);
                out.push(b':');
                self::value(out, item);
            }
            out.push(b'}');
        }
    }
}

/// Appends one operation of a JSON patch, as json-patch serialises it.
pub fn patch_operation(out: &mut Vec<u8>, operation: &PatchOperation) {
    let (op, from, path, item) = match operation {
        PatchOperation::Add(o) => ("add", None, &o.path, Some(&o.value)),
        PatchOperation::Remove(o) => ("remove", None, &o.path, None),
        PatchOperation::Replace(o) => ("replace", None, &o.path, Some(&o.value)),
        PatchOperation::Move(o) => ("move", Some(&o.from), &o.path, None),
        PatchOperation::Copy(o) => ("copy", Some(&o.from), &o.path, None),
        PatchOperation::Test(o) => ("test", None, &o.path, Some(&o.value)),
    };
    out.extend_from_slice(b"{\"op\":\"");
    out.extend_from_slice(op.as_bytes());
    out.push(b'"');
    if let Some(from) = from {
        out.extend_from_slice(b",\"from\":");
        string(out, from.as_str());
    }
    out.extend_from_slice(b",\"path\":");
    string(out, path.as_str());
    if let Some(item) = item {
        out.extend_from_slice(b",\"value\":");
        value(out, item);
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, CopyOperation, MoveOperation, RemoveOperation, ReplaceOperation, TestOperation};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn written(item: &Value) -> String {
        let mut out = Vec::new();
        value(&mut out, item);
        String::from_utf8(out).expect("UTF-8")
    }

    /// Every character below 0x80 alone and between others, and text beyond ASCII, as
    /// serde_json writes them (its escapes: `\"`, `\\`, the five short ones, `\u00XX` in lower
    /// case for the other controls; nothing else escaped).
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for byte in 0_u8..0x80 {
            let one = char::from(byte).to_string();
            for text in [one.clone(), format!("long enough to be read in words {one} and more")] {
                let item = Value::String(text);
                assert_eq!(written(&item), serde_json::to_string(&item).expect("serialises"), "{item:?}");
            }
        }
        let item = json!("é, 日本, 🦀, \u{7f}, \u{2028} and \"quotes\" at the end\\");
        assert_eq!(written(&item), serde_json::to_string(&item).expect("serialises"));
    }

    /// Every kind of operation, as json-patch serialises it.
    #[test]
    fn operations_are_written_as_json_patch_serialises_them() {
        let path = |p: &str| PointerBuf::parse(p).expect("pointer");
        let operations = vec![
            PatchOperation::Add(AddOperation { path: path("/a~1b/-"), value: json!({"x": [1, -2, 0.5, null]}) }),
            PatchOperation::Remove(RemoveOperation { path: path("/c") }),
            PatchOperation::Replace(ReplaceOperation { path: path("/d"), value: json!("t\"ext") }),
            PatchOperation::Move(MoveOperation { from: path("/e"), path: path("/f") }),
            PatchOperation::Copy(CopyOperation { from: path("/g"), path: path("/h") }),
            PatchOperation::Test(TestOperation { path: path("/i"), value: json!(true) }),
        ];
        for operation in &operations {
            let mut out = Vec::new();
            patch_operation(&mut out, operation);
            assert_eq!(out, serde_json::to_vec(operation).expect("serialises"));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        #[test]
        fn values_are_written_as_serde_json_writes_them(item in crate::json::tests::generated_json()) {
            prop_assert_eq!(written(&item), serde_json::to_string(&item).expect("serialises"));
        }
    }
}
