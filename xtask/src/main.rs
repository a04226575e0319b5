//! `cargo xtask`: the project's own tasks (docs/release.md).
//!
//! - `release --version V --registry HOST[:PORT][/PATH] [--plain-http] [--key FILE]`: builds the
//!   three binaries with the shipped profiles for linux/amd64 and linux/arm64, packs each as an
//!   OCI index of both platforms, signs them and their chart, attaches an SBOM to each
//!   platform's manifest and pushes it all to the registry.
//! - `rootfs --binary FILE --out DIR`: lays out an image's files as the release packs them
//!   (deploy/Dockerfile copies that directory into `FROM scratch`).
//! - `agent`: builds the agent as the release does for this machine's platform, its code laid
//!   out by use on linux/amd64 (deploy/Dockerfile).
//! - `agent-layout [--binary FILE]`: makes `agent/layout/hot-functions.txt` again, from what the
//!   agent's shipped build runs under qemu.

mod chart;
mod cmd;
mod layout;
mod oci;
mod platform;
mod registry;
mod release;
mod rootfs;
mod sbom;
mod sign;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "The project's release tasks (docs/release.md)")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Build, pack, sign and push a release: the images watcher-operator, watcher-agent and
    /// watcher-supervise, and the chart charts/watcher-operator, under the registry's path.
    Release(release::Args),
    /// Lay out the files of an image for one binary, as the release packs them.
    Rootfs {
        /// The binary (watcher-operator, watcher-agent or watcher-supervise).
        #[arg(long)]
        binary: PathBuf,
        /// The directory to write (created; must not exist or be empty).
        #[arg(long)]
        out: PathBuf,
    },
    /// Build the agent as the release does for this machine (target/agent/watcher-agent): its
    /// shipped profile, static, and on linux/amd64 its code laid out by use.
    Agent,
    /// Make agent/layout/hot-functions.txt again: the functions the agent's shipped build runs,
    /// traced under qemu-x86_64-static (linux/amd64).
    AgentLayout {
        /// The agent to trace; without it, the agent is built first (`cargo xtask agent`).
        #[arg(long)]
        binary: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Release(args) => release::run(&args),
        Task::Rootfs { binary, out } => rootfs::write_dir(&binary, &out),
        Task::Agent => layout::build_agent().map(|path| println!("{}", path.display())),
        Task::AgentLayout { binary } => layout::agent_layout(binary),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
