//! Each file case on real files in a temporary directory, one `poll` at a time.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;

/// What a sink saw: lines per source, problems.
#[derive(Default)]
struct Seen {
    lines: Vec<(usize, String, bool)>,
    errors: Vec<(usize, SourceError)>,
}

impl Sink for Seen {
    fn line(&mut self, source: usize, line: Line<'_>) {
        self.lines.push((source, String::from_utf8_lossy(line.bytes).into_owned(), line.truncated));
    }
    fn error(&mut self, source: usize, reason: SourceError, _detail: &str) {
        self.errors.push((source, reason));
    }
}

impl Seen {
    fn take(&mut self) -> Vec<String> {
        self.lines.drain(..).map(|(_, line, _)| line).collect()
    }
}

/// A fresh directory under the target's temporary directory.
fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("watcher-agent-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

fn append(path: &Path, text: &str) {
    let mut file = OpenOptions::new().create(true).append(true).open(path).expect("open");
    file.write_all(text.as_bytes()).expect("write");
}

fn follower(dir: &Path, start: Start) -> Follower {
    Follower::new(vec![format!("{}/*.log", dir.display())], start, 64)
}

#[test]
fn start_at_the_end_of_files_present_and_the_beginning_of_new_ones() {
    let dir = dir("start");
    append(&dir.join("app.log"), "old 1\nold 2\n");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    assert!(seen.take().is_empty(), "what was there before is skipped");
    append(&dir.join("app.log"), "new 1\n");
    append(&dir.join("other.log"), "other 1\n");
    fs::write(dir.join("ignored.txt"), "not a log\n").expect("write");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["new 1", "other 1"]);
    append(&dir.join("app.log"), "new 2\n");
    follower.poll(&mut seen);
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["new 2"], "started at the end, the file is still the same file");

    let mut from_start = self::follower(&dir, Start::Beginning);
    from_start.poll(&mut seen);
    let mut all = seen.take();
    all.sort();
    assert_eq!(all, ["new 1", "new 2", "old 1", "old 2", "other 1"]);
}

#[test]
fn rotation_by_rename_reads_the_old_file_to_its_end_then_the_new_one() {
    let dir = dir("rename");
    let log = dir.join("app.log");
    append(&log, "");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    append(&log, "a\nb\n");
    follower.poll(&mut seen);
    // The app writes once more to its open file after the rename, then reopens.
    append(&log, "c\n");
    fs::rename(&log, dir.join("app.log.1")).expect("rotate");
    append(&dir.join("app.log.1"), "d\n");
    append(&log, "e\n");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["a", "b", "c", "d", "e"], "old to its end first, nothing lost, nothing twice");
    for _ in 0..3 {
        follower.poll(&mut seen);
    }
    assert_eq!(follower.paths(), std::slice::from_ref(&log), "the rotated file is closed once done");
    append(&log, "f\n");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["f"]);
}

#[test]
fn copytruncate_reads_the_file_again_from_the_beginning() {
    let dir = dir("truncate");
    let log = dir.join("app.log");
    append(&log, "");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    append(&log, "one\ntwo\nthree\n");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["one", "two", "three"]);
    // copytruncate: copied away, truncated in place; the app writes on.
    fs::copy(&log, dir.join("app.log.1")).expect("copy");
    OpenOptions::new().write(true).open(&log).expect("open").set_len(0).expect("truncate");
    append(&log, "four\n");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["four"]);
    // Truncated and written past the old offset between two looks: told by its first bytes.
    fs::write(&log, "FIVE is a longer first line\nsix\n").expect("rewrite");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["FIVE is a longer first line", "six"]);
}

#[test]
fn a_deleted_and_recreated_file_is_read_from_its_beginning() {
    let dir = dir("recreate");
    let log = dir.join("app.log");
    append(&log, "");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    append(&log, "before\n");
    follower.poll(&mut seen);
    fs::remove_file(&log).expect("delete");
    follower.poll(&mut seen);
    append(&log, "after 1\nafter 2\n");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["before", "after 1", "after 2"]);
}

#[test]
fn a_partial_last_line_waits_for_its_newline() {
    let dir = dir("partial");
    let log = dir.join("app.log");
    append(&log, "");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    append(&log, "ERROR half");
    follower.poll(&mut seen);
    follower.poll(&mut seen);
    assert!(seen.take().is_empty(), "not yet a line");
    append(&log, " and the rest\n");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["ERROR half and the rest"], "one line, once");
}

#[test]
fn a_long_line_is_counted_once_and_memory_stays_bounded() {
    let dir = dir("long");
    let log = dir.join("app.log");
    append(&log, "");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    let long = "x".repeat(1_000_000);
    append(&log, &format!("ERROR {long}\nshort\n"));
    follower.poll(&mut seen);
    let lines: Vec<(usize, bool)> = seen.lines.iter().map(|(_, l, t)| (l.len(), *t)).collect();
    assert_eq!(lines, [(64, true), (5, false)]);
    assert!(seen.lines[0].1.starts_with("ERROR x"));
}

#[test]
fn invalid_utf8_is_a_line_like_any_other() {
    let dir = dir("utf8");
    let log = dir.join("app.log");
    fs::write(&log, b"").expect("create");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    let mut file = OpenOptions::new().append(true).open(&log).expect("open");
    file.write_all(b"\xff\xfe ERROR\n").expect("write");
    follower.poll(&mut seen);
    assert_eq!(seen.lines.len(), 1);
}

#[test]
fn a_missing_directory_is_said_once_and_followed_once_it_exists() {
    let dir = dir("missing");
    let logs = dir.join("logs");
    let mut follower = Follower::new(vec![format!("{}/*.log", logs.display())], Start::End, 64);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    follower.poll(&mut seen);
    assert_eq!(seen.errors, [(0, SourceError::Missing)], "once per change");
    fs::create_dir(&logs).expect("mkdir");
    append(&logs.join("app.log"), "first\n");
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["first"], "a file that appears later is read from its beginning");
    fs::remove_dir_all(&logs).expect("rm");
    for _ in 0..3 {
        follower.poll(&mut seen);
    }
    assert_eq!(seen.errors, [(0, SourceError::Missing), (0, SourceError::Missing)], "said again after it came back");
}

#[test]
fn a_directory_it_may_not_read_is_a_permission_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir("permission");
    let locked = dir.join("locked");
    fs::create_dir(&locked).expect("mkdir");
    append(&locked.join("app.log"), "x\n");
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).expect("chmod");
    if fs::read_dir(&locked).is_ok() {
        // Running as root: permissions do not apply.
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).expect("chmod");
        return;
    }
    let mut follower = Follower::new(vec![format!("{}/*.log", locked.display())], Start::Beginning, 64);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(seen.errors, [(0, SourceError::Permission)]);
    follower.poll(&mut seen);
    assert_eq!(seen.take(), ["x"], "retried, and read once allowed");
}

#[test]
fn globs_pick_up_new_files_in_any_matching_directory() {
    let dir = dir("globs");
    fs::create_dir_all(dir.join("a")).expect("mkdir");
    let mut follower = Follower::new(
        vec![format!("{}/*/app-*.log", dir.display()), format!("{}/plain.txt", dir.display())],
        Start::End,
        64,
    );
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    assert_eq!(seen.errors, [(1, SourceError::Missing)], "a plain file name that does not exist yet");
    fs::create_dir_all(dir.join("b")).expect("mkdir");
    append(&dir.join("a/app-1.log"), "a1\n");
    append(&dir.join("b/app-2.log"), "b2\n");
    append(&dir.join("b/other.log"), "no\n");
    append(&dir.join("plain.txt"), "plain\n");
    follower.poll(&mut seen);
    let mut lines: Vec<(usize, String)> = seen.lines.drain(..).map(|(s, l, _)| (s, l)).collect();
    lines.sort();
    assert_eq!(lines, [(0, "a1".into()), (0, "b2".into()), (1, "plain".into())]);
}

#[test]
fn the_literal_prefix_is_the_directory_before_the_first_pattern() {
    assert_eq!(literal_prefix("/var/log/app/*.log"), PathBuf::from("/var/log/app"));
    assert_eq!(literal_prefix("/var/*/app/x.log"), PathBuf::from("/var"));
    assert_eq!(literal_prefix("/data/app.log"), PathBuf::from("/data/app.log"));
}
