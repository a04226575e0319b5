//! `watcher-supervise`: see the library for what it is for.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    match watcher_supervise::parse(&args) {
        Ok(command) => watcher_supervise::execute(command),
        Err(error) => {
            eprintln!("watcher-supervise: {error}");
            ExitCode::from(2)
        }
    }
}
