//! Each file case on real files in a temporary directory, one `poll` at a time.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;
use crate::tail::lines::Piece;

/// What a sink saw: lines per source, problems, what became of files.
#[derive(Default)]
struct Seen {
    lines: Vec<(usize, String, bool)>,
    errors: Vec<(usize, SourceError)>,
    closed: Vec<&'static str>,
    skipped: Vec<&'static str>,
    truncated: Vec<bool>,
    open: usize,
}

impl Sink for Seen {
    fn take(&mut self, record: Record<'_>) {
        let source = record.source;
        match record.piece {
            Piece::Run(run) => {
                for line in run.split_inclusive(|b| *b == b'\n') {
                    let line = line.strip_suffix(b"\n").unwrap_or(line);
                    self.lines.push((source, String::from_utf8_lossy(line).into_owned(), false));
                }
            }
            Piece::Line(line) => {
                self.lines.push((source, String::from_utf8_lossy(line.bytes).into_owned(), line.truncated));
            }
            Piece::Event(event) => {
                self.lines.push((source, String::from_utf8_lossy(event.text).into_owned(), event.cut_bytes));
            }
        }
    }
    fn report(&mut self, report: Report<'_>) {
        match report {
            Report::Error { source, reason, .. } => self.errors.push((source, reason)),
            Report::Closed(reason) => self.closed.push(reason),
            Report::Skipped(reason) => self.skipped.push(reason),
            Report::Truncated { copy_found, .. } => self.truncated.push(copy_found),
            Report::OpenFiles(count) => self.open = count,
            Report::Reconnected(_) => {}
        }
    }
}

impl Seen {
    fn lines(&mut self) -> Vec<String> {
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

fn numbered(from: usize, to: usize) -> String {
    (from..=to).map(|i| format!("line {i}\n")).collect()
}

fn names(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|i| format!("line {i}")).collect()
}

fn options(globs: Vec<String>, start: Start) -> FollowOptions {
    FollowOptions {
        globs: globs.iter().map(|g| Glob::new(g).expect("a glob")).collect(),
        start,
        max_line: 64,
        rotate_wait: Duration::from_millis(300),
        ignore_older: None,
        max_open: 128,
        multiline: None,
    }
}

fn follower(dir: &Path, start: Start) -> Follower {
    Follower::new(options(vec![format!("{}/*.log", dir.display())], start), Begin::Fresh)
}

fn glob_follower(glob: String, begin: Begin) -> Follower {
    Follower::new(options(vec![glob], Start::End), begin)
}

/// An empty `app.log` in a new directory `name`, followed from its end after a first look.
fn following(name: &str) -> (PathBuf, PathBuf, Follower, Seen) {
    let dir = dir(name);
    let log = dir.join("app.log");
    append(&log, "");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    (dir, log, follower, seen)
}

/// logrotate's copytruncate: `path` copied to `copy`, then truncated in place.
fn copytruncate(path: &Path, copy: &Path) {
    fs::copy(path, copy).expect("copy");
    truncate(path);
}

fn truncate(path: &Path) {
    OpenOptions::new().write(true).open(path).expect("open").set_len(0).expect("truncate");
}

#[test]
fn start_at_the_end_of_files_present_and_the_beginning_of_new_ones() {
    let dir = dir("start");
    append(&dir.join("app.log"), "old 1\nold 2\n");
    let mut follower = follower(&dir, Start::End);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    assert!(seen.lines().is_empty(), "what was there before is skipped");
    append(&dir.join("app.log"), "new 1\n");
    append(&dir.join("other.log"), "other 1\n");
    fs::write(dir.join("ignored.txt"), "not a log\n").expect("write");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["new 1", "other 1"]);
    append(&dir.join("app.log"), "new 2\n");
    follower.poll(&mut seen);
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["new 2"], "started at the end, the file is still the same file");

    let mut from_start = self::follower(&dir, Start::Beginning);
    from_start.poll(&mut seen);
    let mut all = seen.lines();
    all.sort();
    assert_eq!(all, ["new 1", "new 2", "old 1", "old 2", "other 1"]);
}

#[test]
fn rotation_by_rename_reads_the_old_file_to_its_end_then_the_new_one() {
    let (dir, log, mut follower, mut seen) = following("rename");
    append(&log, "a\nb\n");
    follower.poll(&mut seen);
    // The app writes once more to its open file after the rename, then reopens.
    append(&log, "c\n");
    fs::rename(&log, dir.join("app.log.1")).expect("rotate");
    append(&dir.join("app.log.1"), "d\n");
    append(&log, "e\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["a", "b", "c", "d", "e"], "old to its end first, nothing lost, nothing twice");
    std::thread::sleep(Duration::from_millis(400));
    follower.poll(&mut seen);
    assert_eq!(follower.paths(), std::slice::from_ref(&log), "the rotated file is closed once quiet");
    assert_eq!(seen.closed, ["rotated"]);
    append(&log, "f\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["f"]);
}

#[test]
fn copytruncate_reads_the_file_again_from_the_beginning() {
    let (dir, log, mut follower, mut seen) = following("truncate");
    append(&log, "one\ntwo\nthree\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["one", "two", "three"]);
    // copytruncate: copied away, truncated in place; the app writes on.
    copytruncate(&log, &dir.join("app.log.1"));
    append(&log, "four\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["four"]);
    // Truncated and written past the old offset between two looks: told by its first bytes.
    fs::write(&log, "FIVE is a longer first line\nsix\n").expect("rewrite");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["FIVE is a longer first line", "six"]);
}

#[test]
fn a_deleted_and_recreated_file_is_read_from_its_beginning() {
    let (_, log, mut follower, mut seen) = following("recreate");
    append(&log, "before\n");
    follower.poll(&mut seen);
    fs::remove_file(&log).expect("delete");
    follower.poll(&mut seen);
    append(&log, "after 1\nafter 2\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["before", "after 1", "after 2"]);
}

#[test]
fn a_partial_last_line_waits_for_its_newline() {
    let (_, log, mut follower, mut seen) = following("partial");
    append(&log, "ERROR half");
    follower.poll(&mut seen);
    follower.poll(&mut seen);
    assert!(seen.lines().is_empty(), "not yet a line");
    append(&log, " and the rest\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["ERROR half and the rest"], "one line, once");
}

#[test]
fn a_long_line_is_counted_once_and_memory_stays_bounded() {
    let (_, log, mut follower, mut seen) = following("long");
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
    let mut follower = glob_follower(format!("{}/*.log", logs.display()), Begin::Fresh);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    follower.poll(&mut seen);
    assert_eq!(seen.errors, [(0, SourceError::Missing)], "once per change");
    fs::create_dir(&logs).expect("mkdir");
    append(&logs.join("app.log"), "first\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["first"], "a file that appears later is read from its beginning");
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
    let mut follower =
        Follower::new(options(vec![format!("{}/*.log", locked.display())], Start::Beginning), Begin::Fresh);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(seen.errors, [(0, SourceError::Permission)]);
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["x"], "retried, and read once allowed");
}

#[test]
fn globs_pick_up_new_files_in_any_matching_directory() {
    let dir = dir("globs");
    fs::create_dir_all(dir.join("a")).expect("mkdir");
    let globs = vec![format!("{}/*/app-*.log", dir.display()), format!("{}/plain.txt", dir.display())];
    let mut follower = Follower::new(options(globs, Start::End), Begin::Fresh);
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
    let base = |glob: &str| Glob::new(glob).expect("a glob").base().to_path_buf();
    assert_eq!(base("/var/log/app/*.log"), PathBuf::from("/var/log/app"));
    assert_eq!(base("/var/*/app/x.log"), PathBuf::from("/var"));
    assert_eq!(base("/data/app.log"), PathBuf::from("/data/app.log"));
}

/// The app writes to its old file for a while after the rename (it reopens late): read until the
/// file has not grown for `AGENT_ROTATE_WAIT`, however many polls that is.
#[test]
fn a_renamed_file_is_read_until_quiet_for_the_rotate_wait() {
    let (dir, log, mut follower, mut seen) = following("rotate-wait");
    append(&log, &numbered(1, 10));
    fs::rename(&log, dir.join("app.log.1")).expect("rotate");
    for i in 11..=30 {
        append(&dir.join("app.log.1"), &format!("line {i}\n"));
        follower.poll(&mut seen);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(seen.lines(), names(1, 30), "every line the app wrote late");
    assert!(seen.closed.is_empty(), "growing: not closed however many polls");
    std::thread::sleep(Duration::from_millis(400));
    follower.poll(&mut seen);
    assert_eq!(seen.closed, ["rotated"]);
}

/// copytruncate: five lines written just before the copy are in the copy only (`app.log.1`,
/// which the glob does not match); they are read from it, from where the file was left.
#[test]
fn copytruncate_reads_what_only_the_copy_holds() {
    let (dir, log, mut follower, mut seen) = following("copy-only");
    append(&log, &numbered(1, 20));
    follower.poll(&mut seen);
    append(&log, &numbered(21, 25));
    copytruncate(&log, &dir.join("app.log.1"));
    append(&log, &numbered(26, 30));
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), names(1, 30), "nothing lost, nothing twice");
    assert_eq!(seen.truncated, [true], "the copy was found");
}

/// The glob matches the rotated files too (`app.log*`): a rename is the same file (its inode), a
/// copy holds what was read (its fingerprint and bytes), a compressed one is never text.
#[test]
fn rotated_files_the_glob_matches_are_never_read_twice() {
    let dir = dir("glob-rotated");
    let log = dir.join("app.log");
    append(&log, "");
    let mut follower = glob_follower(format!("{}/app.log*", dir.display()), Begin::Fresh);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    append(&log, &numbered(1, 5));
    follower.poll(&mut seen);
    // Renamed: app.log -> app.log.1, and a new app.log.
    fs::rename(&log, dir.join("app.log.1")).expect("rename");
    append(&log, &numbered(6, 10));
    follower.poll(&mut seen);
    // app.log.1 -> app.log.2, app.log -> app.log.1: the same files under new names.
    fs::rename(dir.join("app.log.1"), dir.join("app.log.2")).expect("rename");
    fs::rename(&log, dir.join("app.log.1")).expect("rename");
    append(&log, &numbered(11, 15));
    follower.poll(&mut seen);
    // copytruncate of app.log into app.log.0 (matched by the glob), then truncation.
    append(&log, &numbered(16, 20));
    copytruncate(&log, &dir.join("app.log.0"));
    append(&log, &numbered(21, 25));
    // A compressed rotation.
    fs::write(dir.join("app.log.2.gz"), b"\x1f\x8b\x08\x00line 99\n").expect("gz");
    follower.poll(&mut seen);
    follower.poll(&mut seen);
    let mut lines = seen.lines();
    lines.sort_by_key(|l| l[5..].parse::<usize>().unwrap_or(0));
    assert_eq!(lines, names(1, 25), "25 written, 25 counted");
    assert_eq!(seen.skipped, ["compressed"]);
}

/// A file renamed and caught by the glob again after it was closed (`AGENT_ROTATE_WAIT` passed):
/// it continues from where it was read to.
#[test]
fn a_closed_file_caught_again_continues_where_it_was_left() {
    let (dir, log, mut follower, mut seen) = following("caught-again");
    append(&log, &numbered(1, 3));
    fs::rename(&log, dir.join("app.old")).expect("out of the glob");
    follower.poll(&mut seen);
    std::thread::sleep(Duration::from_millis(400));
    follower.poll(&mut seen);
    assert_eq!(seen.closed, ["rotated"]);
    append(&dir.join("app.old"), &numbered(4, 5));
    fs::rename(dir.join("app.old"), dir.join("back.log")).expect("into the glob");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), names(1, 5));
}

/// Checkpoints: a restarted follower resumes each file where it was read to, and reads the lines
/// written while it was down once, whatever `AGENT_START` says; a file rotated while it was down
/// (the glob matches it) continues too; a file new since is read from its beginning.
#[test]
fn a_restart_resumes_each_file_from_its_mark() {
    let dir = dir("restart");
    let log = dir.join("app.log");
    append(&log, &numbered(1, 5));
    let glob = format!("{}/app.log*", dir.display());
    let mut first = glob_follower(glob.clone(), Begin::FirstInPod);
    let mut seen = Seen::default();
    first.poll(&mut seen);
    assert_eq!(seen.lines(), names(1, 5), "the first start in the pod: from the beginning");
    append(&log, "line 6 half");
    first.poll(&mut seen);
    first.finish(&mut seen, false);
    assert!(seen.lines().is_empty(), "a partial line is left for the next start");
    let marks = first.marks();
    drop(first);
    // Down: the line completed, more written, the file rotated, a new one.
    append(&log, "\n");
    append(&log, &numbered(7, 10));
    fs::rename(&log, dir.join("app.log.1")).expect("rotate");
    append(&log, &numbered(11, 15));
    let since = SystemTime::now() - Duration::from_secs(60);
    let mut second = glob_follower(glob, Begin::Restart { files: marks, since });
    second.poll(&mut seen);
    let mut lines = seen.lines();
    lines.sort_by_key(|l| l[5..].split(' ').next().and_then(|n| n.parse::<usize>().ok()).unwrap_or(0));
    let mut expected = names(6, 15);
    expected[0] = "line 6 half".into();
    assert_eq!(lines, expected, "written while down: once");
}

/// Without checkpoints, a last line without its newline is counted at shutdown (nothing would
/// complete it), and only once.
#[test]
fn finish_counts_a_partial_last_line_without_checkpoints() {
    let (_, log, mut follower, mut seen) = following("finish");
    append(&log, "line 1\nERROR the last words");
    follower.finish(&mut seen, true);
    assert_eq!(seen.lines(), ["line 1", "ERROR the last words"]);
}

/// With checkpoints, shutdown counts the event that waits for its end (its lines are whole) and
/// marks the file after it; a last line without its newline is left for the next start.
#[test]
fn finish_ends_the_waiting_event_with_checkpoints() {
    let dir = dir("finish-event");
    let log = dir.join("app.log");
    append(&log, "");
    let multiline = crate::tail::multiline::Multiline {
        start: crate::tail::multiline::Start::Java,
        wait: Duration::from_secs(60),
        max_lines: 500,
        max_bytes: 1024,
    };
    let glob = vec![format!("{}/*.log", dir.display())];
    let options = FollowOptions { multiline: Some(std::sync::Arc::new(multiline)), ..options(glob, Start::End) };
    let mut follower = Follower::new(options, Begin::Fresh);
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    let trace = "Exception: x\n\tat a\n";
    append(&log, &format!("{trace}partial"));
    follower.poll(&mut seen);
    assert!(seen.lines().is_empty(), "the event waits for its end");
    assert_eq!(follower.marks()[0].offset, 0, "a checkpoint resumes at the event's first line");
    follower.finish(&mut seen, false);
    assert_eq!(seen.lines(), ["Exception: x\n\tat a"]);
    assert_eq!(follower.marks()[0].offset, trace.len() as u64, "after the event, before the partial line");
}

/// `AGENT_IGNORE_OLDER`: a file unchanged that long is closed and opened again where it was left
/// when it changes; `AGENT_MAX_OPEN_FILES`: the least recently grown is closed first.
#[test]
fn idle_files_are_closed_and_open_files_bounded() {
    let dir = dir("idle");
    for name in ["a.log", "b.log", "c.log"] {
        append(&dir.join(name), "");
    }
    let glob = vec![format!("{}/*.log", dir.display())];
    let mut follower = Follower::new(
        FollowOptions { ignore_older: Some(Duration::from_millis(1000)), max_open: 2, ..options(glob, Start::End) },
        Begin::Fresh,
    );
    let mut seen = Seen::default();
    follower.poll(&mut seen);
    assert_eq!(seen.open, 2, "at most two open");
    assert!(seen.closed.is_empty(), "files opened in a look are read in it: {:?}", seen.closed);
    follower.poll(&mut seen);
    assert_eq!(seen.open, 2, "at most two open");
    assert!(seen.closed.contains(&"limit"), "the third took a descriptor: {:?}", seen.closed);
    append(&dir.join("a.log"), "a 1\n");
    append(&dir.join("b.log"), "b 1\n");
    append(&dir.join("c.log"), "c 1\n");
    for _ in 0..4 {
        follower.poll(&mut seen);
    }
    let mut lines = seen.lines();
    lines.sort();
    assert_eq!(lines, ["a 1", "b 1", "c 1"], "a closed file that changed is read where it was left");
    std::thread::sleep(Duration::from_millis(1100));
    follower.poll(&mut seen);
    assert_eq!(seen.open, 0, "idle: closed");
    assert!(seen.closed.contains(&"idle"), "{:?}", seen.closed);
    // Empty files too: closed once, and they stay closed while they do not change.
    append(&dir.join("d.log"), "");
    follower.poll(&mut seen);
    std::thread::sleep(Duration::from_millis(1100));
    let closed = seen.closed.len();
    for _ in 0..5 {
        follower.poll(&mut seen);
    }
    assert_eq!((seen.open, seen.closed.len()), (0, closed + 1), "{:?}", seen.closed);
    append(&dir.join("b.log"), "b 2\n");
    follower.poll(&mut seen);
    assert_eq!(seen.lines(), ["b 2"]);
}

/// Any number of files followed, at most `max_open` open: 2,000 files with content before the
/// first look (`AGENT_START: end`: skipped, also in files that wait for a descriptor), written
/// three times: every line read once, never more than 128 open.
#[test]
fn thousands_of_files_are_followed_through_a_few_descriptors() {
    const FILES: usize = 2000;
    let dir = dir("thousands");
    let name = |i: usize| dir.join(format!("job-{i:04}.log"));
    for i in 0..FILES {
        append(&name(i), &format!("before {i}\n"));
    }
    let glob = vec![format!("{}/*.log", dir.display())];
    let mut follower = Follower::new(FollowOptions { max_open: 128, ..options(glob, Start::End) }, Begin::Fresh);
    let mut seen = Seen::default();
    // Polls while there is more to read: the most files open meanwhile.
    let poll = |follower: &mut Follower, seen: &mut Seen| {
        let mut most = 0;
        while follower.poll(seen) {
            most = most.max(seen.open);
        }
        most.max(seen.open)
    };
    let mut most_open = poll(&mut follower, &mut seen);
    for round in 1..=3 {
        for i in 0..FILES {
            append(&name(i), &format!("round {round} {i}\n"));
        }
        most_open = most_open.max(poll(&mut follower, &mut seen));
    }
    let lines = seen.lines();
    let unique: HashSet<&String> = lines.iter().collect();
    assert_eq!((lines.len(), unique.len()), (3 * FILES, 3 * FILES), "every line once");
    assert!(lines.iter().all(|l| l.starts_with("round")), "what was there before is skipped");
    assert_eq!(most_open, 128);
    assert_eq!(follower.followed(), FILES);
    // Gone files are forgotten: all but the last tenth (the files open now among them).
    for i in 0..FILES - FILES / 10 {
        fs::remove_file(name(i)).expect("delete");
    }
    poll(&mut follower, &mut seen);
    assert_eq!(follower.followed(), FILES / 10);
    assert_eq!(follower.marks().len(), FILES / 10, "remembered: the files that exist");
}

/// A file closed for the limit that grows and is then rotated while closed: renamed out of the
/// glob, it is found by its inode and read from where it was left; copied and truncated, its
/// copy is read, then the truncated file from its beginning.
#[test]
fn a_file_rotated_while_closed_loses_nothing() {
    let dir = dir("rotated-closed");
    let (renamed, truncated) = (dir.join("a.log"), dir.join("b.log"));
    append(&renamed, "a 1\n");
    append(&truncated, "b 1\n");
    let glob = vec![format!("{}/*.log", dir.display())];
    let mut follower = Follower::new(FollowOptions { max_open: 1, ..options(glob, Start::Beginning) }, Begin::Fresh);
    let mut seen = Seen::default();
    while follower.poll(&mut seen) {}
    follower.poll(&mut seen);
    let mut lines = seen.lines();
    lines.sort();
    assert_eq!(lines, ["a 1", "b 1"]);
    // Whichever is closed now: both rotated while one is.
    append(&renamed, "a 2\n");
    append(&truncated, "b 2\n");
    fs::rename(&renamed, dir.join("a.log.1")).expect("rename");
    append(&renamed, "a 3\n");
    copytruncate(&truncated, &dir.join("b.log.1"));
    append(&truncated, "b 3\n");
    for _ in 0..5 {
        follower.poll(&mut seen);
    }
    let mut lines = seen.lines();
    lines.sort();
    assert_eq!(lines, ["a 2", "a 3", "b 2", "b 3"]);
}
