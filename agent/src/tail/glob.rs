//! A glob of files (`AGENT_FILES`), compiled once when the configuration is read: the directory
//! it starts from, a pattern per component after it, and the whole pattern for a path found
//! elsewhere (a file moved while the agent was down). Each look walks it again without parsing
//! it again. Read as the `glob` crate reads it: `*`, `?` and `[…]` within one component, `**` as a
//! whole component for any number of directories, names starting with a dot matched as any.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use glob::{MatchOptions, Pattern};

/// How deep `**` goes below where it stands: far beyond any log directory, short of a loop of
/// symbolic links.
const MAX_RECURSION: usize = 16;

/// A glob, compiled.
#[derive(Clone, Debug)]
pub struct Glob {
    text: String,
    /// The whole glob, its `*` kept within a component as in the walk.
    whole: Pattern,
    /// The components before the first with a pattern character: the directory that must exist
    /// for the glob to match anything (the whole path for a plain file name).
    base: PathBuf,
    /// The components after `base`.
    parts: Vec<Part>,
}

#[derive(Clone, Debug)]
enum Part {
    /// A name without a pattern character.
    Name(OsString),
    /// A name with one.
    Matching(Pattern),
    /// `**`: any number of directories, none included.
    Directories,
}

/// `*` never crosses a `/` in the whole pattern, as it cannot in a component of the walk.
const WHOLE: MatchOptions =
    MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };
/// A component's pattern, as the `glob` crate's walk matches it (its `MatchOptions::new()`).
const COMPONENT: MatchOptions =
    MatchOptions { case_sensitive: true, require_literal_separator: false, require_literal_leading_dot: false };

impl Glob {
    /// `text` (an absolute path, with pattern characters or not), compiled; what is wrong with
    /// it on one line.
    pub fn new(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!("{text:?} is not an absolute path"));
        }
        let not_a_glob = |problem: glob::PatternError| format!("{text:?} is not a glob: {problem}");
        let whole = Pattern::new(text).map_err(not_a_glob)?;
        let mut base = PathBuf::from("/");
        let mut parts = Vec::new();
        for component in Path::new(text).components().skip(1) {
            let name = component.as_os_str();
            let shown = name.to_string_lossy();
            if shown == "**" {
                parts.push(Part::Directories);
            } else if shown.contains(['*', '?', '[']) {
                parts.push(Part::Matching(Pattern::new(&shown).map_err(not_a_glob)?));
            } else if parts.is_empty() {
                base.push(name);
            } else {
                parts.push(Part::Name(name.to_owned()));
            }
        }
        Ok(Self { text: text.to_owned(), whole, base, parts })
    }

    /// The glob as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `path` is one the glob names.
    pub fn matches(&self, path: &Path) -> bool {
        self.whole.matches_path_with(path, WHOLE)
    }

    /// The directory (or, without a pattern character, the file) that must exist for the glob to
    /// match anything.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Calls `found` with each path the glob matches now, in name order directory by directory,
    /// or with a directory it could not read and why. A directory that is not there is no
    /// problem: nothing is there yet.
    pub fn walk(&self, found: &mut impl FnMut(Result<PathBuf, (PathBuf, io::Error)>)) {
        let exists = |path: &Path| path.symlink_metadata().is_ok();
        if self.parts.is_empty() {
            if exists(&self.base) {
                found(Ok(self.base.clone()));
            }
            return;
        }
        self.walk_from(&self.base, 0, 0, found);
    }

    fn walk_from(
        &self,
        dir: &Path,
        part: usize,
        depth: usize,
        found: &mut impl FnMut(Result<PathBuf, (PathBuf, io::Error)>),
    ) {
        let last = part + 1 == self.parts.len();
        match &self.parts[part] {
            Part::Name(name) => {
                let path = dir.join(name);
                if last {
                    if path.symlink_metadata().is_ok() {
                        found(Ok(path));
                    }
                } else if path.is_dir() {
                    self.walk_from(&path, part + 1, depth, found);
                }
            }
            Part::Matching(pattern) => {
                for (name, path) in entries(dir, found) {
                    if !name.to_str().is_some_and(|n| pattern.matches_with(n, COMPONENT)) {
                        continue;
                    }
                    if last {
                        found(Ok(path));
                    } else if path.is_dir() {
                        self.walk_from(&path, part + 1, depth, found);
                    }
                }
            }
            Part::Directories => {
                if last {
                    // `/a/**`: every directory below `/a`, as the `glob` crate names them.
                    for (_, path) in entries(dir, found) {
                        if path.is_dir() {
                            found(Ok(path.clone()));
                            if depth < MAX_RECURSION {
                                self.walk_from(&path, part, depth + 1, found);
                            }
                        }
                    }
                    return;
                }
                self.walk_from(dir, part + 1, depth, found);
                if depth < MAX_RECURSION {
                    for (_, path) in entries(dir, found) {
                        if path.is_dir() {
                            self.walk_from(&path, part, depth + 1, found);
                        }
                    }
                }
            }
        }
    }
}

/// The entries of `dir` by name (a directory that is not there has none; one that cannot be
/// read is said to `found`).
fn entries(dir: &Path, found: &mut impl FnMut(Result<PathBuf, (PathBuf, io::Error)>)) -> Vec<(OsString, PathBuf)> {
    let read: io::Result<Vec<(OsString, PathBuf)>> =
        std::fs::read_dir(dir).and_then(|d| d.map(|e| e.map(|e| (e.file_name(), e.path()))).collect());
    match read {
        Ok(mut entries) => {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            entries
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(error) => {
            found(Err((dir.to_path_buf(), error)));
            Vec::new()
        }
    }
}

/// Two globs are the same where they are written the same.
impl PartialEq for Glob {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Glob {}

impl PartialEq<&str> for Glob {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str, files: &[&str]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("agent-glob-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for file in files {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
            std::fs::write(path, "x\n").expect("a file");
        }
        root
    }

    fn walked(glob: &Glob) -> Vec<String> {
        let mut paths = Vec::new();
        glob.walk(&mut |entry| paths.push(entry.expect("readable").display().to_string()));
        paths
    }

    /// Every glob the tests and docs use finds what the `glob` crate's own walk finds, in the
    /// same order, and matches the paths it finds.
    #[test]
    fn the_walk_finds_what_the_glob_crate_finds() {
        let root = tree(
            "walk",
            &[
                "a/app-1.log",
                "a/app-2.log",
                "a/.hidden.log",
                "a/other.txt",
                "b/app-3.log",
                "b/deep/app-4.log",
                "b/deep/er/app-5.log",
                "plain.txt",
                "c[1]/x.log",
            ],
        );
        let r = root.display();
        for text in [
            format!("{r}/*/app-*.log"),
            format!("{r}/a/*.log"),
            format!("{r}/plain.txt"),
            format!("{r}/missing.txt"),
            format!("{r}/missing/*.log"),
            format!("{r}/**/*.log"),
            format!("{r}/b/**/app-?.log"),
            format!("{r}/[ab]/app-[0-9].log"),
            format!("{r}/c[[]1[]]/*.log"),
            format!("{r}/*"),
            format!("{r}/b/**"),
        ] {
            let glob = Glob::new(&text).expect("a glob");
            let theirs: Vec<String> =
                glob::glob(&text).expect("a glob").map(|p| p.expect("readable").display().to_string()).collect();
            let ours = walked(&glob);
            assert_eq!(ours, theirs, "{text}");
            assert!(ours.iter().all(|p| glob.matches(Path::new(p))), "{text}: {ours:?}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_glob_is_absolute_and_valid_and_says_where_it_starts() {
        assert_eq!(Glob::new("var/log/*.log").expect_err("relative"), "\"var/log/*.log\" is not an absolute path");
        assert!(Glob::new("/var/log/[.log").expect_err("unclosed").starts_with("\"/var/log/[.log\" is not a glob: "));
        assert_eq!(Glob::new("/var/log/app/*.log").expect("a glob").base(), Path::new("/var/log/app"));
        assert_eq!(Glob::new("/data/err.log").expect("a glob").base(), Path::new("/data/err.log"));
        let glob = Glob::new("/var/log/*.log").expect("a glob");
        assert!(glob.matches(Path::new("/var/log/app.log")));
        assert!(!glob.matches(Path::new("/var/log/app/x.log")), "a * stays within its component");
    }
}
