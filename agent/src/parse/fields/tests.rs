use super::*;

fn paths(list: &[&str]) -> Vec<String> {
    list.iter().map(|p| (*p).to_owned()).collect()
}

fn texts(record: &Record<'_>) -> Vec<Option<String>> {
    record.values.iter().map(|v| v.as_ref().map(|f| String::from_utf8_lossy(f.bytes()).into_owned())).collect()
}

fn some(text: &str) -> Option<String> {
    Some(text.to_owned())
}

#[test]
fn json_fields_by_dotted_path_wherever_they_stand() {
    let line = br#"{"ts":"2026-11-28T10:00:00Z","level":"error","route":"/cart","http":{"status":503,"ms":734,"tls":{"v":"1.3"}},"tags":["a","b"],"ok":false,"msg":"upstream \"db\" timed out\n","none":null}"#;
    let wanted = paths(&["level", "http.ms", "http.tls.v", "tags", "ok", "msg", "none", "missing", "http"]);
    let record = json(line, &wanted).expect("JSON");
    assert_eq!(
        texts(&record),
        [
            some("error"),
            some("734"),
            some("1.3"),
            some(r#"["a","b"]"#),
            some("false"),
            some("upstream \"db\" timed out\n"),
            None,
            None,
            some(r#"{"status":503,"ms":734,"tls":{"v":"1.3"}}"#),
        ]
    );
    assert!(record.values[8].as_ref().is_some_and(Field::is_container));
    assert!(!record.values[1].as_ref().is_some_and(Field::is_container));
}

#[test]
fn a_key_with_a_dot_is_a_field_too() {
    let record = json(br#"{"http.ms": 12, "http": {"ms": 34}}"#, &paths(&["http.ms"])).expect("JSON");
    assert_eq!(texts(&record), [some("34")], "the last value wins");
}

/// A key given twice is read as its last value (as serde_json and Go's encoding/json read it).
#[test]
fn duplicate_keys_last_wins() {
    let record = json(br#"{"level":"info","level":"error"}"#, &paths(&["level"])).expect("JSON");
    assert_eq!(texts(&record), [some("error")]);
}

/// What is not a JSON object, a line each (and the empty line): the last ones break containers
/// that a rule reading `a` skips over, and those are checked all the same.
const NOT_JSON: &str = r#"plain text
[1,2]
"a string"
{"a":1
{"a":1} trailing
{"n":0x10}
{"n":NaN}
{"n":01}
{"n":1.}
{a:1}
{"a" 1}
{"a":1,}
{"a":"unterminated}
{"a":"bad \x escape"}
{"a":[1,2}
{"a":[1,,x]}
{"a":[1 2]}
{"a":[1,]}
{"a":[,1]}
{"a":[tru]}
{"a":[01]}
{"a":{"b" 1}}
{"a":{"b":1,}}
{"a":{1:2}}
{"a":{"b"}}
{"a":{"b":}}
{"a":["x" "y"]}
{"a":[{]}]}"#;

/// JSON objects, a line each (and one with spaces around it).
const JSON: &str = r#"{}
{"n":-0}
{"n":1e400}
{"n":-1.5E-3}
{"a":[1, {"b": [true, null, "x\"]"]}, [], {}], "c": { "d" : -2.5e3 }}"#;

#[test]
fn what_is_not_a_json_object_is_not_json() {
    for line in NOT_JSON.lines().chain([""]) {
        let text = line.as_bytes();
        assert_eq!(json(text, &paths(&["a"])).err(), Some(NotInFormat), "{line}");
        assert_eq!(json(text, &paths(&["z"])).err(), Some(NotInFormat), "skipped: {line}");
    }
    for line in JSON.lines().chain([r#" { "a" : [ ] } "#]) {
        assert!(json(line.as_bytes(), &paths(&["n"])).is_ok(), "{line}");
        // serde_json refuses 1e400 (out of f64's range); every other it reads.
        let in_range = !line.contains("1e400");
        assert!(!in_range || serde_json::from_str::<serde_json::Value>(line).is_ok(), "serde_json reads it too");
    }
}

/// Numbers are read as written: `1e400` and `-0` are JSON; what they are as values is the
/// value's to say.
#[test]
fn numbers_as_written() {
    let record = json(br#"{"a":1e400,"b":-0,"c":2.5e-3}"#, &paths(&["a", "b", "c"])).expect("JSON");
    assert_eq!(texts(&record), [some("1e400"), some("-0"), some("2.5e-3")]);
}

/// Nested 10,000 deep: no stack overflow, wherever the field is.
#[test]
fn deep_nesting_is_read_without_recursion() {
    let depth = 10_000;
    let mut line = String::from(r#"{"level":"error","deep":"#);
    line.push_str(&"[".repeat(depth));
    line.push_str(&"]".repeat(depth));
    line.push_str(r#","obj":"#);
    line.push_str(&r#"{"a":"#.repeat(depth));
    line.push('1');
    line.push_str(&"}".repeat(depth));
    line.push('}');
    let record = json(line.as_bytes(), &paths(&["level"])).expect("JSON");
    assert_eq!(texts(&record), [some("error")]);
    // A wanted path down the nesting is followed on the heap.
    let mut path = String::from("obj");
    for _ in 0..depth {
        path.push_str(".a");
    }
    let record = json(line.as_bytes(), &[path]).expect("JSON");
    assert_eq!(texts(&record), [some("1")]);
    // Unbalanced at depth: not JSON.
    let broken = format!(r#"{{"x":{}}}"#, "[".repeat(depth));
    assert!(json(broken.as_bytes(), &paths(&["x"])).is_err());
}

#[test]
fn strings_are_bytes_and_escapes_are_read() {
    let line =
        b"{\"msg\":\"caf\xc3\xa9 \xff\xfe bad utf-8\",\"u\":\"\\u00e9\\ud83d\\ude00\\ud800x\",\"k\\u0065y\":\"v\"}";
    let record = json(line, &paths(&["msg", "u", "key"])).expect("JSON");
    assert_eq!(record.values[0].as_ref().map(Field::bytes), Some(&b"caf\xc3\xa9 \xff\xfe bad utf-8"[..]));
    assert_eq!(texts(&record)[1], some("é😀\u{fffd}x"));
    assert_eq!(texts(&record)[2], some("v"), "an escaped key");
}

#[test]
fn logfmt_pairs_quotes_escapes_and_bare_keys() {
    let line =
        br#"level=error route=/cart ms=734 msg="upstream \"db\" timed out" path="C:\\tmp" debug empty= http.ms=12"#;
    let record =
        logfmt(line, &paths(&["level", "ms", "msg", "path", "debug", "empty", "http.ms", "missing"])).expect("logfmt");
    assert_eq!(
        texts(&record),
        [
            some("error"),
            some("734"),
            some(r#"upstream "db" timed out"#),
            some(r"C:\tmp"),
            some(""),
            some(""),
            some("12"),
            None
        ]
    );
    let record = logfmt(br#"a=1 a=2"#, &paths(&["a"])).expect("logfmt");
    assert_eq!(texts(&record), [some("2")], "the last value wins");
}

#[test]
fn what_is_not_logfmt_is_not_logfmt() {
    for line in [&b"ERROR connection refused"[..], b"a=\"unclosed", b"=value", b"a=1 =2", b"", b"x\"y=1"] {
        assert_eq!(logfmt(line, &[]).err(), Some(NotInFormat), "{}", String::from_utf8_lossy(line));
    }
}

#[test]
fn auto_reads_each_line_as_it_comes() {
    let wanted = paths(&["level"]);
    let json_line = read(Format::Auto, br#"{"level":"error"}"#, &wanted).expect("never an error");
    assert_eq!(json_line.as_ref().map(texts), Some(vec![some("error")]));
    let logfmt_line = read(Format::Auto, b"level=warn x=1", &wanted).expect("never an error");
    assert_eq!(logfmt_line.as_ref().map(texts), Some(vec![some("warn")]));
    assert!(read(Format::Auto, b"ERROR plain text", &wanted).expect("never an error").is_none());
    assert!(read(Format::Json, b"level=warn", &wanted).is_err());
    assert!(read(Format::Text, br#"{"level":"error"}"#, &wanted).expect("text").is_none());
}
