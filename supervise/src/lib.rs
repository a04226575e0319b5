//! `watcher-supervise`: a Watcher's sidecar ends with its app, in pods that are meant to end.
//!
//! In a pod whose `restartPolicy` is `Never` or `OnFailure` (a Job's, a CronJob's, an At's) a
//! sidecar would run on after the app and keep the pod from ever finishing: a regular container
//! (servers before 1.29, `nativeSidecar: Never`) is never stopped, and a native one is sent
//! SIGTERM, which a command that is its container's PID 1 ignores unless it handles it (`tail`,
//! `sh -c`). The webhook copies this binary into such a pod (`install`, from an init container
//! of this binary's image) and runs the sidecar's command under it (`run`), which stops the
//! command on SIGTERM (SIGKILL after the grace period) and exits 0.
//!
//! A regular sidecar also ends by itself, with no change to the pod's spec, so the kubelet
//! counts no restart (a Job under `OnFailure` counts every one toward its `backoffLimit`): once
//! the app containers have ended for good, the operator writes `watcher.dev/sidecars-ended` on
//! the pod, the downward API puts it in the file `--ended-file` names, and the supervisor, which
//! looks at that file as it looks at signals, stops the command and exits 0.
//!
//! Pods admitted before the file existed are ended the older way: the operator switches the
//! sidecar's image to this binary's image, where a supervisor started from another path sees
//! that its work is done and exits 0 at once, as the image's entrypoint (`ended`) does.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

/// How long a stopped command has between SIGTERM and SIGKILL, by default: the operator ends a
/// sidecar within seconds of its app, so a sidecar that ignores SIGTERM cannot keep a pod waiting.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);
/// Where this binary's image keeps it. A supervisor started from another path that finds it
/// there runs in that image: the sidecar was switched to it, and has ended.
pub const IMAGE_BINARY: &str = "/usr/local/bin/watcher-supervise";
/// The file name `install` writes into its directory.
pub const INSTALLED_NAME: &str = "watcher-supervise";
/// How often the supervisor looks at signals, at the ended file and at its command.
const TICK: Duration = Duration::from_millis(50);
/// Signals passed on to the command's process group; the first three also start its stop.
const FORWARDED: [Signal; 6] = [Signal::TERM, Signal::INT, Signal::QUIT, Signal::HUP, Signal::USR1, Signal::USR2];
const STOPPING: usize = 3;

const USAGE: &str = "usage:
  watcher-supervise install DIR                          copy this binary into DIR (an init container's step)
  watcher-supervise run [--grace-period SECONDS] [--ended-file FILE] -- COMMAND [ARG...]
                                                         run COMMAND; on SIGTERM, or once FILE is not empty
                                                         (the pod's app containers have ended), stop it
                                                         (SIGKILL after the grace period, default 3 s) and
                                                         exit 0
  watcher-supervise ended                                exit 0 at once (the image's entrypoint: a sidecar
                                                         switched to this image has ended)
  watcher-supervise --version                            print the version, commit, profile and target";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    /// Copy this binary into a directory.
    Install(PathBuf),
    /// Run a command under supervision.
    Run {
        /// SIGTERM to SIGKILL.
        grace: Duration,
        /// A file that says, once it is not empty, that the app has ended.
        ended: Option<PathBuf>,
        /// The program and its arguments.
        command: Vec<OsString>,
    },
    /// The sidecar has ended: exit 0.
    Ended,
    /// Print the usage.
    Help,
    /// Print what this binary is (version, commit, profile, target).
    Version,
}

/// A command line that cannot be run.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n{USAGE}", self.0)
    }
}

/// Reads the arguments (without the program's name). Anything but `install`, `run` and `help`
/// is the ending: the image's entrypoint is `ended`, and a sidecar that sets `args` but no
/// command gives the entrypoint its own arguments instead.
pub fn parse(args: &[OsString]) -> Result<Command, UsageError> {
    let Some(first) = args.first() else { return Ok(Command::Ended) };
    match first.to_str() {
        Some("install") => match &args[1..] {
            [dir] => Ok(Command::Install(PathBuf::from(dir))),
            _ => Err(UsageError("install takes one directory".into())),
        },
        Some("run") => parse_run(&args[1..]),
        Some("help" | "--help" | "-h") => Ok(Command::Help),
        Some("version" | "--version" | "-V") => Ok(Command::Version),
        _ => Ok(Command::Ended),
    }
}

fn parse_run(args: &[OsString]) -> Result<Command, UsageError> {
    let mut grace = DEFAULT_GRACE;
    let mut ended = None;
    let mut rest = args;
    loop {
        match rest.first().and_then(|a| a.to_str()) {
            Some("--") => {
                rest = &rest[1..];
                break;
            }
            Some("--grace-period") => {
                let value = rest.get(1).and_then(|v| v.to_str()).unwrap_or_default();
                let seconds: u64 = value.parse().map_err(|_| {
                    UsageError(format!("--grace-period takes a whole number of seconds, not {value:?}"))
                })?;
                if seconds > 300 {
                    return Err(UsageError(format!("--grace-period {seconds}: at most 300 seconds")));
                }
                grace = Duration::from_secs(seconds);
                rest = &rest[2..];
            }
            Some("--ended-file") => {
                let Some(file) = rest.get(1).filter(|f| !f.is_empty()) else {
                    return Err(UsageError("--ended-file takes a file's path".into()));
                };
                ended = Some(PathBuf::from(file));
                rest = &rest[2..];
            }
            _ => break,
        }
    }
    if rest.is_empty() {
        return Err(UsageError("run needs a command after --".into()));
    }
    Ok(Command::Run { grace, ended, command: rest.to_vec() })
}

/// Carries out `command`; the process exits with what it returns.
pub fn execute(command: Command) -> ExitCode {
    match command {
        Command::Help => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Command::Version => {
            println!("watcher-supervise {}", watcher_build_info::LONG_VERSION);
            ExitCode::SUCCESS
        }
        Command::Ended => {
            eprintln!("watcher-supervise: the pod's app containers have ended; this sidecar ends with them");
            ExitCode::SUCCESS
        }
        Command::Install(dir) => match install(&dir) {
            Ok(path) => {
                eprintln!("watcher-supervise: installed {}", path.display());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("watcher-supervise: cannot install into {}: {error}", dir.display());
                ExitCode::FAILURE
            }
        },
        Command::Run { grace, ended, command } => {
            if switched_to_own_image() {
                eprintln!("watcher-supervise: the sidecar was switched to its ending image; it ends with the app");
                return ExitCode::SUCCESS;
            }
            if ended.as_deref().is_some_and(has_ended) {
                // Started again after the app ended (the container was restarted): nothing to do.
                eprintln!("watcher-supervise: the pod's app containers have ended; this sidecar ends with them");
                return ExitCode::SUCCESS;
            }
            ExitCode::from(supervise(grace, ended.as_deref(), &command))
        }
    }
}

/// Copies the running binary into `dir` (through a temporary file, then a rename: a supervisor
/// already running from there keeps its own copy).
pub fn install(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let source = std::env::current_exe()?;
    let target = dir.join(INSTALLED_NAME);
    let temporary = dir.join(format!(".{INSTALLED_NAME}.{}", std::process::id()));
    std::fs::copy(&source, &temporary)?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&temporary, &target)?;
    Ok(target)
}

/// Whether this supervisor runs in its own image, started from elsewhere: the operator switched
/// the sidecar's image once the app had ended.
fn switched_to_own_image() -> bool {
    let own = Path::new(IMAGE_BINARY);
    own.exists() && std::env::current_exe().is_ok_and(|exe| exe != own)
}

/// Whether the ended file says that the app has ended: it is there and not empty (the downward
/// API writes an annotation that is not there as an empty file).
pub fn has_ended(file: &Path) -> bool {
    std::fs::metadata(file).is_ok_and(|m| m.len() > 0)
}

/// Runs `command` in a process group of its own until it exits, passing signals on and
/// stopping it once `ended` says the app has ended; the exit code is the command's (128 + a
/// signal that ended it), or 0 when it was stopped on request.
fn supervise(grace: Duration, ended: Option<&Path>, command: &[OsString]) -> u8 {
    use std::os::unix::process::CommandExt;
    let flags: Vec<Arc<AtomicBool>> = FORWARDED.iter().map(|_| Arc::new(AtomicBool::new(false))).collect();
    for (signal, flag) in FORWARDED.iter().zip(&flags) {
        if let Err(error) = signal_hook::flag::register(signal.as_raw(), flag.clone()) {
            eprintln!("watcher-supervise: cannot handle signal {}: {error}", signal.as_raw());
            return 1;
        }
    }
    let (program, args) = (&command[0], &command[1..]);
    let child = match std::process::Command::new(program).args(args).process_group(0).spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("watcher-supervise: cannot run {}: {error}", program.to_string_lossy());
            return if error.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
        }
    };
    let group = Pid::from_child(&child);
    // Reaped below with every other child (the supervisor may be the container's PID 1).
    drop(child);
    let mut stopping: Option<Instant> = None;
    let mut killed = false;
    loop {
        for (index, (signal, flag)) in FORWARDED.iter().zip(&flags).enumerate() {
            if flag.swap(false, Ordering::SeqCst) {
                if index < STOPPING && stopping.is_none() {
                    stopping = Some(Instant::now());
                }
                let _ = rustix::process::kill_process_group(group, *signal);
            }
        }
        if stopping.is_none() && ended.is_some_and(has_ended) {
            eprintln!("watcher-supervise: the pod's app containers have ended: stopping the command");
            stopping = Some(Instant::now());
            let _ = rustix::process::kill_process_group(group, Signal::TERM);
        }
        if let Some(since) = stopping
            && !killed
            && since.elapsed() >= grace
        {
            eprintln!("watcher-supervise: the command did not stop within {} s: killed", grace.as_secs());
            let _ = rustix::process::kill_process_group(group, Signal::KILL);
            killed = true;
        }
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some((pid, status))) if pid == group => {
                    if stopping.is_some() {
                        return 0;
                    }
                    return match (status.exit_status(), status.terminating_signal()) {
                        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
                        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
                        (None, None) => 1,
                    };
                }
                Ok(Some(_)) => {} // an orphan the container's init reaps
                Ok(None) | Err(_) => break,
            }
        }
        std::thread::sleep(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn reads_each_command() {
        assert_eq!(parse(&args(&["install", "/x"])), Ok(Command::Install("/x".into())));
        assert_eq!(
            parse(&args(&["run", "--", "sh", "-c", "tail -F /x"])),
            Ok(Command::Run { grace: DEFAULT_GRACE, ended: None, command: args(&["sh", "-c", "tail -F /x"]) })
        );
        assert_eq!(
            parse(&args(&["run", "--grace-period", "7", "--ended-file", "/e/ended", "--", "sleep", "9"])),
            Ok(Command::Run {
                grace: Duration::from_secs(7),
                ended: Some("/e/ended".into()),
                command: args(&["sleep", "9"])
            })
        );
        // Without `--` the command starts at the first argument that is no option.
        assert_eq!(
            parse(&args(&["run", "sleep", "9"])),
            Ok(Command::Run { grace: DEFAULT_GRACE, ended: None, command: args(&["sleep", "9"]) })
        );
        assert_eq!(parse(&args(&["--help"])), Ok(Command::Help));
        assert_eq!(parse(&args(&["--version"])), Ok(Command::Version));
    }

    #[test]
    fn anything_else_is_the_ending() {
        // The image's entrypoint, alone or given a sidecar's own `args`.
        assert_eq!(parse(&[]), Ok(Command::Ended));
        assert_eq!(parse(&args(&["ended"])), Ok(Command::Ended));
        assert_eq!(parse(&args(&["--config", "/etc/agent.yaml"])), Ok(Command::Ended));
    }

    #[test]
    fn a_bad_command_line_says_what_is_wrong() {
        let error = parse(&args(&["run", "--"])).expect_err("refused");
        assert!(error.0.contains("needs a command"), "{error}");
        let error = parse(&args(&["run", "--grace-period", "soon", "--", "x"])).expect_err("refused");
        assert!(error.0.contains("\"soon\""), "{error}");
        let error = parse(&args(&["run", "--grace-period", "301", "--", "x"])).expect_err("refused");
        assert!(error.0.contains("at most 300"), "{error}");
        let error = parse(&args(&["run", "--ended-file", "", "--", "x"])).expect_err("refused");
        assert!(error.0.contains("--ended-file takes"), "{error}");
        let error = parse(&args(&["install"])).expect_err("refused");
        assert!(error.to_string().contains("usage:"), "{error}");
    }
}
