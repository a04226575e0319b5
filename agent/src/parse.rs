//! Parsing: what a line says beside its text. A structured line's fields ([`fields`]: JSON or
//! logfmt, only the paths the rules read) and a value's number in its unit ([`value`]).

pub mod fields;
pub mod value;
