//! Running the tools the release leans on (cargo, git, skopeo, helm, ldd), with their words kept
//! when they fail.

use std::ffi::OsStr;
use std::process::{Command, Output};

use anyhow::{Context, bail};

/// What a finished command said.
#[derive(Debug)]
pub(crate) struct Said {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `program` with `args`, its output captured; fails only when it cannot be started.
pub(crate) fn capture<S: AsRef<OsStr>>(program: &str, args: &[S]) -> anyhow::Result<Said> {
    let output: Output = Command::new(program).args(args).output().with_context(|| {
        format!("cannot run {program} (is it installed? docs/release.md lists what a release needs)")
    })?;
    Ok(Said {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Runs `program`, failing with what it said on stderr when it fails; its stdout.
pub(crate) fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> anyhow::Result<String> {
    let said = capture(program, args)?;
    if !said.ok {
        let shown: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
        bail!("{program} {} failed: {}", shown.join(" "), said.stderr.trim());
    }
    Ok(said.stdout)
}
