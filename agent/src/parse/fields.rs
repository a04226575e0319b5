//! Structured lines: a JSON object or logfmt pairs, read for the few fields the rules name
//! (dotted paths into nested objects, `http.ms`), in one pass without building the object: the
//! rest is checked as strictly and skipped. Nesting is followed on the heap (a line nested 10,000 deep is
//! read like any other), strings stay bytes (a string that is not UTF-8 is matched on its
//! bytes), and a key given twice is read as its last value, as most JSON readers do.
//!
//! It is not `admission`'s JSON reader, by design: that one is a serde deserializer of UTF-8
//! text that checks an AdmissionReview as serde_json would (numbers in f64's range, surrogate
//! pairs), building the types it reads; this one reads log lines, which are bytes, for a few
//! paths and builds nothing, numbers as written (`1e400` is a number: what it is as a value is
//! the value's to say), and the agent does not link the admission crate. Both refuse what is not
//! JSON's syntax, in every container, read or skipped.

use std::borrow::Cow;

/// How a source's lines are read (`AGENT_FORMAT`, `AGENT_STDOUT_FORMAT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Text: only line regexes.
    #[default]
    Text,
    /// Each line a JSON object.
    Json,
    /// Each line logfmt pairs (`level=error route=/cart ms=734`).
    Logfmt,
    /// Each line as it comes: a JSON object, else logfmt pairs, else text.
    Auto,
}

impl Format {
    /// The words the variables take.
    pub const WORDS: [&'static str; 4] = ["text", "json", "logfmt", "auto"];

    /// The format a word names.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "text" => Self::Text,
            "json" => Self::Json,
            "logfmt" => Self::Logfmt,
            "auto" => Self::Auto,
            _ => return None,
        })
    }
}

/// What a field holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    /// A string (JSON, unescaped) or a logfmt value.
    Text(Cow<'a, [u8]>),
    /// A JSON number, boolean, object or array, as written.
    Raw(&'a [u8]),
}

impl Field<'_> {
    /// Its bytes: a string's text, anything else as written.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Text(text) => text,
            Self::Raw(raw) => raw,
        }
    }

    /// Whether it is a JSON object or array (never a value).
    pub fn is_container(&self) -> bool {
        matches!(self, Self::Raw(raw) if raw.first().is_some_and(|b| *b == b'{' || *b == b'['))
    }
}

/// The fields the rules name, by index, as one line gives them.
#[derive(Debug, Default)]
pub struct Record<'a> {
    /// `values[i]`: the field of path `i`, where the line has it (`null` is not a value).
    pub values: Vec<Option<Field<'a>>>,
}

/// A line that is not what its format says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotInFormat;

/// Reads `line` as `format` says, for the fields at `paths`: `Ok(None)` for text (a `text`
/// source, or an `auto` line that is neither JSON nor logfmt); `Err` where the line is not what
/// `json` or `logfmt` says.
pub fn read<'a>(format: Format, line: &'a [u8], paths: &[String]) -> Result<Option<Record<'a>>, NotInFormat> {
    match format {
        Format::Text => Ok(None),
        Format::Json => json(line, paths).map(Some),
        Format::Logfmt => logfmt(line, paths).map(Some),
        Format::Auto => Ok(json(line, paths).or_else(|_| logfmt(line, paths)).ok()),
    }
}

/// A JSON object's fields at `paths`.
pub fn json<'a>(line: &'a [u8], paths: &[String]) -> Result<Record<'a>, NotInFormat> {
    let mut reader = Json { text: line, at: 0, paths, record: Record { values: vec![None; paths.len()] } };
    reader.space();
    if reader.peek() != Some(b'{') {
        return Err(NotInFormat);
    }
    reader.document()?;
    reader.space();
    if reader.at != line.len() {
        return Err(NotInFormat);
    }
    Ok(reader.record)
}

struct Json<'a, 'p> {
    text: &'a [u8],
    at: usize,
    paths: &'p [String],
    record: Record<'a>,
}

/// An object being read for the fields in it: the path to it (`http.`), and where a field is
/// the object itself, which one and where it starts.
struct Frame {
    prefix: String,
    whole: Option<(usize, usize)>,
    first: bool,
}

impl<'a> Json<'a, '_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), NotInFormat> {
        self.space();
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(NotInFormat)
        }
    }

    /// The object at `at`. Objects that hold a wanted field are read key by key, on a stack
    /// (no recursion); every other value is checked and skipped whole.
    fn document(&mut self) -> Result<(), NotInFormat> {
        self.at += 1;
        let mut stack = vec![Frame { prefix: String::new(), whole: None, first: true }];
        while let Some(frame) = stack.last_mut() {
            self.space();
            if self.peek() == Some(b'}') {
                self.at += 1;
                if let Some((index, start)) = frame.whole {
                    self.record.values[index] = Some(Field::Raw(&self.text[start..self.at]));
                }
                stack.pop();
                continue;
            }
            if !std::mem::replace(&mut frame.first, false) {
                self.expect(b',')?;
                self.space();
            }
            let key = self.string()?;
            self.expect(b':')?;
            self.space();
            // Which wanted path is this field, and which go on inside it: compared as bytes, no
            // path built (a line's keys are many, the wanted paths few).
            let prefix = frame.prefix.as_bytes();
            let (mut wanted, mut inside) = (None, false);
            for (index, path) in self.paths.iter().enumerate() {
                let path = path.as_bytes();
                // Lengths and the first byte first: most keys differ there.
                let Some(rest) = path.get(prefix.len()..) else { continue };
                if rest.len() < key.len() || rest.first() != key.first() || rest[..key.len()] != key[..] {
                    continue;
                }
                if !path.starts_with(prefix) {
                    continue;
                }
                match rest.get(key.len()) {
                    None => wanted = Some(index),
                    Some(b'.') => inside = true,
                    Some(_) => {}
                }
            }
            let start = self.at;
            match self.peek() {
                Some(b'{') if inside => {
                    self.at += 1;
                    let mut prefix = frame.prefix.clone();
                    prefix.push_str(&String::from_utf8_lossy(&key));
                    prefix.push('.');
                    stack.push(Frame { prefix, whole: wanted.map(|index| (index, start)), first: true });
                }
                Some(b'{' | b'[') => {
                    self.skip_container()?;
                    if let Some(index) = wanted {
                        self.record.values[index] = Some(Field::Raw(&self.text[start..self.at]));
                    }
                }
                Some(b'"') => {
                    let text = self.string()?;
                    if let Some(index) = wanted {
                        self.record.values[index] = Some(Field::Text(text));
                    }
                }
                _ => {
                    let literal = self.literal()?;
                    if let Some(index) = wanted {
                        // `null`: no value, as if the key were not there (the last one wins).
                        self.record.values[index] = (literal != b"null").then_some(Field::Raw(literal));
                    }
                }
            }
        }
        Ok(())
    }

    /// A string at `at`, unescaped (bytes: a string that is not UTF-8 stays as it is).
    fn string(&mut self) -> Result<Cow<'a, [u8]>, NotInFormat> {
        if self.peek() != Some(b'"') {
            return Err(NotInFormat);
        }
        let start = self.at + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            let found = memchr::memchr2(b'"', b'\\', &self.text[at..]).ok_or(NotInFormat)?;
            at += found;
            if self.text[at] == b'"' {
                break;
            }
            escaped = true;
            match self.text.get(at + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => at += 2,
                Some(b'u')
                    if self.text.len() >= at + 6 && self.text[at + 2..at + 6].iter().all(u8::is_ascii_hexdigit) =>
                {
                    at += 6;
                }
                _ => return Err(NotInFormat),
            }
        }
        self.at = at + 1;
        let raw = &self.text[start..at];
        Ok(if escaped { Cow::Owned(unescape(raw)) } else { Cow::Borrowed(raw) })
    }

    /// A number, `true`, `false` or `null` at `at`.
    fn literal(&mut self) -> Result<&'a [u8], NotInFormat> {
        let start = self.at;
        let rest = &self.text[start..];
        let len = rest
            .iter()
            .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
            .unwrap_or(rest.len());
        let literal = &rest[..len];
        if !(matches!(literal, b"true" | b"false" | b"null") || is_json_number(literal)) {
            return Err(NotInFormat);
        }
        self.at += len;
        Ok(literal)
    }

    /// Past the object or array at `at`, checked as the objects read key by key are: every
    /// member a key, `:` and a value, every value a string, a number, `true`, `false`, `null`
    /// or a container, commas between them and none after the last (`[1,,x]` is not JSON). The
    /// open containers are kept on the heap, their closers only.
    fn skip_container(&mut self) -> Result<(), NotInFormat> {
        let mut closing: Vec<u8> = Vec::new();
        loop {
            // A value.
            self.space();
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    self.at += 1;
                    let close = if open == b'{' { b'}' } else { b']' };
                    self.space();
                    if self.peek() == Some(close) {
                        self.at += 1;
                    } else {
                        closing.push(close);
                        if close == b'}' {
                            self.member_key()?;
                        }
                        continue;
                    }
                }
                Some(b'"') => {
                    self.string()?;
                }
                _ => {
                    self.literal()?;
                }
            }
            // After it: a comma and the next member, or the end of its container (and maybe of
            // those around it).
            loop {
                let Some(&close) = closing.last() else { return Ok(()) };
                self.space();
                match self.peek() {
                    Some(b',') => {
                        self.at += 1;
                        if close == b'}' {
                            self.member_key()?;
                        }
                        break;
                    }
                    Some(byte) if byte == close => {
                        self.at += 1;
                        closing.pop();
                    }
                    _ => return Err(NotInFormat),
                }
            }
        }
    }

    /// A member's key and its `:`.
    fn member_key(&mut self) -> Result<(), NotInFormat> {
        self.space();
        self.string()?;
        self.expect(b':')
    }
}

/// Whether `text` is a JSON number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(text: &[u8]) -> bool {
    let mut at = usize::from(text.first() == Some(&b'-'));
    let digits = |from: usize| text[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let whole = digits(at);
    if whole == 0 || (whole > 1 && text[at] == b'0') {
        return false;
    }
    at += whole;
    if text.get(at) == Some(&b'.') {
        let fraction = digits(at + 1);
        if fraction == 0 {
            return false;
        }
        at += 1 + fraction;
    }
    if matches!(text.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(text.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let exponent = digits(at);
        if exponent == 0 {
            return false;
        }
        at += exponent;
    }
    at == text.len()
}

/// A JSON string's escapes read (`\uXXXX` surrogate pairs joined; a lone surrogate as U+FFFD).
fn unescape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut at = 0;
    while at < raw.len() {
        if raw[at] != b'\\' {
            out.push(raw[at]);
            at += 1;
            continue;
        }
        let escape = raw[at + 1];
        at += 2;
        let byte = match escape {
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hex = |at: usize| {
                    std::str::from_utf8(raw.get(at..at + 4)?).ok().and_then(|h| u32::from_str_radix(h, 16).ok())
                };
                let mut code = hex(at).unwrap_or(0xfffd);
                at += 4;
                if (0xd800..0xdc00).contains(&code)
                    && raw.get(at..at + 2) == Some(b"\\u")
                    && let Some(low) = hex(at + 2).filter(|low| (0xdc00..0xe000).contains(low))
                {
                    code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                    at += 6;
                }
                let c = char::from_u32(code).unwrap_or('\u{fffd}');
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                continue;
            }
            other => other,
        };
        out.push(byte);
    }
    out
}

/// logfmt pairs' fields at `paths` (a dotted path is a key as written: logfmt is flat): keys
/// separated by spaces, `key=value`, `key="quoted \"value\""`, or a bare `key` (an empty value).
/// A line without one `key=value` pair, with an unclosed quote or a pair without a key, is not
/// logfmt.
pub fn logfmt<'a>(line: &'a [u8], paths: &[String]) -> Result<Record<'a>, NotInFormat> {
    let mut record = Record { values: vec![None; paths.len()] };
    let mut at = 0;
    let mut pairs = 0;
    let blank = |b: u8| b == b' ' || b == b'\t';
    while at < line.len() {
        while at < line.len() && blank(line[at]) {
            at += 1;
        }
        if at == line.len() {
            break;
        }
        let start = at;
        while at < line.len() && !blank(line[at]) && line[at] != b'=' {
            if line[at] == b'"' {
                return Err(NotInFormat);
            }
            at += 1;
        }
        let key = &line[start..at];
        if key.is_empty() {
            return Err(NotInFormat);
        }
        let value: Cow<'a, [u8]> = if line.get(at) == Some(&b'=') {
            at += 1;
            pairs += 1;
            if line.get(at) == Some(&b'"') {
                let (value, end) = quoted(line, at + 1)?;
                at = end;
                value
            } else {
                let start = at;
                while at < line.len() && !blank(line[at]) {
                    at += 1;
                }
                Cow::Borrowed(&line[start..at])
            }
        } else {
            Cow::Borrowed(&line[at..at])
        };
        if let Some(index) = paths.iter().position(|p| p.as_bytes() == key) {
            record.values[index] = Some(Field::Text(value));
        }
    }
    if pairs == 0 {
        return Err(NotInFormat);
    }
    Ok(record)
}

/// The quoted value that starts at `at` (after its `"`), and where it ends (after its `"`):
/// `\"`, `\\`, `\n`, `\t`, `\r` read, any other escape kept as written.
fn quoted(line: &[u8], mut at: usize) -> Result<(Cow<'_, [u8]>, usize), NotInFormat> {
    let start = at;
    let mut owned: Option<Vec<u8>> = None;
    loop {
        let found = memchr::memchr2(b'"', b'\\', &line[at..]).ok_or(NotInFormat)?;
        let end = at + found;
        if line[end] == b'"' {
            let value = match owned {
                Some(mut owned) => {
                    owned.extend_from_slice(&line[at..end]);
                    Cow::Owned(owned)
                }
                None => Cow::Borrowed(&line[start..end]),
            };
            return Ok((value, end + 1));
        }
        let escape = *line.get(end + 1).ok_or(NotInFormat)?;
        let out = owned.get_or_insert_with(Vec::new);
        out.extend_from_slice(&line[at..end]);
        match escape {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'"' | b'\\' => out.push(escape),
            other => out.extend_from_slice(&[b'\\', other]),
        }
        at = end + 2;
    }
}

#[cfg(test)]
mod tests;
