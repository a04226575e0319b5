//! `watcher-supervise` as a process: what the kubelet and the operator see of a sidecar under it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_watcher-supervise");

fn supervise(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    command
}

/// Waits (at most 30 s, far above what any case takes) for `child` to exit.
fn exit_of(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "the supervisor did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `path` to hold a pid, written by the supervised command once it runs.
fn pid_in(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still runs (a zombie has ended).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

fn terminate(child: &Child) {
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("watcher-supervise-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn the_command_s_own_exit_code_is_the_container_s() {
    let status = supervise(&["run", "--", "sh", "-c", "exit 3"]).status().expect("run");
    assert_eq!(status.code(), Some(3));
    let status = supervise(&["run", "--", "true"]).status().expect("run");
    assert_eq!(status.code(), Some(0));
    // Killed by a signal it did not get from the supervisor: 128 + the signal, as a shell says.
    let status = supervise(&["run", "--", "sh", "-c", "kill -KILL $$"]).status().expect("run");
    assert_eq!(status.code(), Some(137));
}

#[test]
fn sigterm_stops_a_command_that_ignores_it_after_the_grace_period_and_exits_0() {
    let dir = scratch("ignores");
    let pidfile = dir.join("pid");
    let script = format!("trap '' TERM; echo $$ > {}; while true; do sleep 1; done", pidfile.display());
    let mut child = supervise(&["run", "--grace-period", "1", "--", "sh", "-c", &script]).spawn().expect("spawn");
    let pid = pid_in(&pidfile);
    terminate(&child);
    let status = exit_of(&mut child);
    assert_eq!(status.code(), Some(0), "stopped on request: 0, so the pod's phase is the app's");
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).expect("stderr");
    assert!(stderr.contains("did not stop within 1 s: killed"), "{stderr}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(pid) {
        assert!(Instant::now() < deadline, "the command outlived its supervisor");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_reaches_the_whole_command_and_a_command_that_stops_is_not_killed() {
    let dir = scratch("stops");
    let pidfile = dir.join("pid");
    // The shell's child, `sleep`, gets SIGTERM too: the process group, not only its leader.
    let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
    let mut child = supervise(&["run", "--grace-period", "20", "--", "sh", "-c", &script]).spawn().expect("spawn");
    let sleeper = pid_in(&pidfile);
    terminate(&child);
    let status = exit_of(&mut child);
    assert_eq!(status.code(), Some(0));
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).expect("stderr");
    assert!(!stderr.contains("killed"), "stopped by SIGTERM, not killed: {stderr}");
    assert!(!running(sleeper), "the shell's child got SIGTERM");
}

#[test]
fn the_ended_file_stops_the_command_and_the_supervisor_exits_0() {
    let dir = scratch("ended");
    let (pidfile, ended) = (dir.join("pid"), dir.join("ended"));
    // As the downward API writes it: empty while the annotation is not there.
    std::fs::write(&ended, "").expect("empty ended file");
    let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
    let ended_arg = ended.display().to_string();
    let mut child = supervise(&["run", "--ended-file", &ended_arg, "--", "sh", "-c", &script]).spawn().expect("spawn");
    let sleeper = pid_in(&pidfile);
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().expect("wait").is_none(), "an empty file: the app has not ended");
    std::fs::write(&ended, "2026-11-28T03:00:00Z").expect("the mark");
    let status = exit_of(&mut child);
    assert_eq!(status.code(), Some(0), "ended with the app: 0, and no restart");
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).expect("stderr");
    assert!(stderr.contains("app containers have ended: stopping the command"), "{stderr}");
    assert!(!running(sleeper), "the whole command stopped");

    // Started again once the app has ended (a restarted container): it ends at once.
    let status = supervise(&["run", "--ended-file", &ended_arg, "--", "sleep", "60"]).status().expect("run");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_command_that_cannot_run_says_so() {
    let output = supervise(&["run", "--", "/no/such/program"]).output().expect("run");
    assert_eq!(output.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot run /no/such/program"), "{stderr}");
}

#[test]
fn the_image_s_entrypoint_ends_at_once_whatever_its_arguments() {
    for args in [&[][..], &["ended"][..], &["--log-level", "debug"][..]] {
        let status = supervise(args).status().expect("run");
        assert_eq!(status.code(), Some(0), "{args:?}");
    }
    let output = supervise(&["run", "--grace-period", "x", "--", "true"]).output().expect("run");
    assert_eq!(output.status.code(), Some(2), "a usage error is no ending");
}

#[test]
fn install_copies_an_executable_supervisor() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("install");
    let status = supervise(&["install", dir.to_str().expect("utf-8")]).status().expect("install");
    assert!(status.success());
    let installed = dir.join("watcher-supervise");
    let mode = std::fs::metadata(&installed).expect("installed").permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    let status = Command::new(&installed).args(["run", "--", "sh", "-c", "exit 5"]).status().expect("run the copy");
    assert_eq!(status.code(), Some(5));
    // Installing again (the init container run again) replaces it.
    assert!(supervise(&["install", dir.to_str().expect("utf-8")]).status().expect("install").success());
    let missing = dir.join("missing");
    let output = supervise(&["install", missing.to_str().expect("utf-8")]).output().expect("install");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot install into"));
}
