//! The command line: `run` (default), `crds`, `inject`, `certs`, `check`, `check-inject`,
//! `rollout`.

use std::collections::BTreeMap;

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

mod execute;
mod run;
mod values;

pub use execute::{causes, execute};
pub use run::{ControllerName, DeployedOptions, RunArgs, deployed_options, run_args};
pub(crate) use values::parse_labels;
use values::{parse_namespace, parse_pod_security_config};

/// Injects Watcher sidecars into pods, rewrites their images, and reconciles Watcher,
/// ClusterWatcher, At, PodSet and ImagePolicy resources and synced Secrets and ConfigMaps.
#[derive(Debug, Parser)]
#[command(name = "watcher-operator", version = watcher_build_info::LONG_VERSION, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook and run the controllers (the default).
    Run(RunArgs),
    #[command(flatten)]
    Tool(Tool),
}

/// The commands that do their work and exit: every one but `run`.
#[derive(Debug, Subcommand)]
pub enum Tool {
    /// Print the CustomResourceDefinitions as YAML.
    Crds,
    /// Show a pod as the webhook would admit it (no cluster needed): prints the mutated pod(s)
    /// as YAML, warnings on stderr.
    Inject(InjectArgs),
    /// Write a CA and a serving certificate for the webhook Service (for manual TLS setups).
    Certs(CertsArgs),
    /// Is the installation healthy? One line per check, grouped, with what to do about each
    /// failure; exit code 1 when any check fails. `--pre` before an install.
    Check(CheckArgs),
    /// Why a pod is, or would be, injected or not, Watcher by Watcher, and which ImagePolicy
    /// rewrites which image: for a pod of the cluster (`POD -n NS`) or a manifest (`-f FILE`).
    CheckInject(CheckInjectArgs),
    /// A Watcher's or ClusterWatcher's sidecar rollout (`updatePolicy` Recreate or InPlace), as
    /// `kubectl rollout` shows and steers a Deployment's: status, pause, resume, history, undo.
    #[command(subcommand)]
    Rollout(RolloutCommand),
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Follow the rollout: exit 0 once every pod outside the partition runs the current spec,
    /// 1 when it is paused, stuck, or at --timeout.
    Status(RolloutStatusArgs),
    /// Start no new update (`updatePolicy.paused: true`); those in flight finish.
    Pause(RolloutArgs),
    /// Go on with a paused rollout (`updatePolicy.paused: false`).
    Resume(RolloutArgs),
    /// The Watcher's revisions: number, spec hash, how many pods carry each, and its image.
    History(RolloutArgs),
    /// Write a revision's container back into the Watcher (default: the revision before the
    /// current one).
    Undo(RolloutUndoArgs),
}

/// The Watcher a `rollout` command is about.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// The Watcher's name (`NAME` or `watcher/NAME`), or `clusterwatcher/NAME` for a
    /// ClusterWatcher's rollout across its namespaces.
    watcher: String,
    /// The Watcher's namespace (default: the kubeconfig context's; a ClusterWatcher has none).
    #[arg(short = 'n', long, env = "WATCHER_ROLLOUT_NAMESPACE", value_parser = parse_namespace)]
    namespace: Option<String>,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Flags of `rollout status`.
#[derive(Debug, Args)]
pub struct RolloutStatusArgs {
    #[command(flatten)]
    target: RolloutArgs,
    /// How long to wait (`30s`, `5m`, `1h`); `0` waits for ever.
    #[arg(long, env = "WATCHER_ROLLOUT_TIMEOUT", default_value = "0", value_parser = crate::rollout::parse_timeout)]
    timeout: std::time::Duration,
}

/// Flags of `rollout undo`.
#[derive(Debug, Args)]
pub struct RolloutUndoArgs {
    #[command(flatten)]
    target: RolloutArgs,
    /// The revision to go back to (see `rollout history`).
    #[arg(long, env = "WATCHER_TO_REVISION")]
    to_revision: Option<i64>,
}

impl RolloutArgs {
    /// A client, and what the command is about (a Watcher in the flag's namespace, else the
    /// kubeconfig context's).
    async fn client(&self) -> anyhow::Result<(kube::Client, crate::rollout::Target)> {
        let client = self.cluster.client().await?;
        let namespace = self.namespace.clone().unwrap_or_else(|| client.default_namespace().to_owned());
        let target = crate::rollout::Target::parse(&self.watcher, &namespace)?;
        Ok((client, target))
    }
}

/// How to reach the cluster, as kubectl takes it. Without either flag: in-cluster config, then
/// `KUBECONFIG`, then `~/.kube/config`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// The kubeconfig file to use.
    #[arg(long, env = "WATCHER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, env = "WATCHER_CONTEXT")]
    context: Option<String>,
}

impl ClusterArgs {
    async fn client(&self) -> anyhow::Result<kube::Client> {
        use anyhow::Context as _;
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let options = KubeConfigOptions { context: self.context.clone(), ..KubeConfigOptions::default() };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
            }
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
            None => kube::Config::infer()
                .await
                .context("no cluster: tried in-cluster config, KUBECONFIG, ~/.kube/config")?,
        };
        Ok(kube::Client::try_from(config)?)
    }
}

/// `-o`: text for people, JSON for machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Flags of `watcher-operator check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Check whether the cluster can take an install instead: its version, the admission API,
    /// and whether you may create what the install creates.
    #[arg(long, env = "WATCHER_CHECK_PRE")]
    pre: bool,
    /// Output format.
    #[arg(short = 'o', long, env = "WATCHER_OUTPUT", value_enum, default_value_t = Output::Text)]
    output: Output,
    /// The operator's namespace (its Deployment, Lease and TLS Secret).
    #[arg(short = 'n', long, env = "WATCHER_NAMESPACE", default_value = "watcher-system", value_parser = parse_namespace)]
    namespace: String,
    /// Where the admission probe's dry-run pod is created: a namespace the webhook serves.
    #[arg(long, env = "WATCHER_PROBE_NAMESPACE", default_value = "default", value_parser = parse_namespace)]
    probe_namespace: String,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Flags of `watcher-operator check-inject`.
#[derive(Debug, Args)]
pub struct CheckInjectArgs {
    /// A pod of the cluster.
    #[arg(required_unless_present = "filename", conflicts_with = "filename")]
    pod: Option<String>,
    /// A Pod manifest (YAML or JSON, one Pod; `-` reads stdin), judged against the cluster.
    #[arg(short = 'f', long, env = "WATCHER_FILENAME")]
    filename: Option<PathBuf>,
    /// The pod's namespace (default: the manifest's, else the kubeconfig context's).
    #[arg(short = 'n', long, env = "WATCHER_POD_NAMESPACE", value_parser = parse_namespace)]
    namespace: Option<String>,
    /// The operator's namespace, never injected (default: the webhook Service's, else
    /// `watcher-system`).
    #[arg(long, env = "WATCHER_OPERATOR_NAMESPACE", value_parser = parse_namespace)]
    operator_namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, env = "WATCHER_OUTPUT", value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Flags of `watcher-operator inject`.
#[derive(Debug, Args)]
pub struct InjectArgs {
    /// Pod manifest(s), YAML, several documents allowed; `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pods: PathBuf,
    /// Watcher manifest(s), YAML; repeat the flag for more files. Watchers without a namespace
    /// stand for Watchers of the pod's namespace.
    #[arg(long = "watcher", required_unless_present = "image_policies")]
    watchers: Vec<PathBuf>,
    /// ImagePolicy manifest(s), YAML; repeat the flag for more files. Policies with a
    /// `namespaceSelector` are left out (there are no namespace labels offline).
    #[arg(long = "image-policy")]
    image_policies: Vec<PathBuf>,
    /// Namespace of pods that name none (default `default`).
    #[arg(long)]
    namespace: Option<String>,
    /// Labels of the pods' namespace, `KEY=VALUE,...`, as the `namespaceSelector` of
    /// ClusterWatchers and ImagePolicies reads them (always with `kubernetes.io/metadata.name`:
    /// the namespace's name, as kube-apiserver sets it).
    #[arg(long, env = "WATCHER_NAMESPACE_LABELS", value_name = "KEY=VALUE,...", value_parser = parse_labels)]
    namespace_labels: Option<BTreeMap<String, String>>,
    /// Whether the cluster runs native sidecars (Kubernetes 1.29 or later); decides
    /// `nativeSidecar: Auto`.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    native_sidecars: bool,
    /// The cluster's Pod Security admission configuration (as for `run`): the level of a
    /// namespace whose `--namespace-labels` set none.
    #[arg(long, env = "WATCHER_POD_SECURITY_CONFIG", value_name = "FILE", value_parser = parse_pod_security_config)]
    pod_security_config: Option<watcher_admission::pod_security::ClusterDefaults>,
    /// LimitRange manifest(s) of the pods' namespace, YAML; repeat the flag for more files. The
    /// Watchers' containers get its defaults and are brought within its bounds, as the webhook
    /// does.
    #[arg(long = "limit-range", value_name = "FILE")]
    limit_ranges: Vec<PathBuf>,
    /// ResourceQuota manifest(s) of the pods' namespace, YAML; repeat the flag for more files.
    /// What a quota counts is stated in the Watchers' containers, and a Watcher that does not fit
    /// in what is left (`hard` less the `status.used` the file gives) is left out.
    #[arg(long = "resource-quota", value_name = "FILE")]
    resource_quotas: Vec<PathBuf>,
}

/// Flags of `watcher-operator certs`.
#[derive(Debug, Args)]
pub struct CertsArgs {
    /// The webhook Service's name.
    #[arg(long, default_value = "watcher-operator")]
    service: String,
    /// The webhook Service's namespace.
    #[arg(long, default_value = "watcher-system")]
    namespace: String,
    /// Directory to write ca.crt, ca.key, tls.crt and tls.key into.
    #[arg(long)]
    out_dir: PathBuf,
    /// More names (DNS names or IP addresses) the serving certificate covers.
    #[arg(long = "host")]
    hosts: Vec<String>,
    /// Serving certificate lifetime in days (the CA lives twice as long).
    #[arg(long, default_value_t = 365)]
    days: u32,
}

/// What the process does: run the operator (`run`, the default command), or another command.
pub enum Job {
    /// The webhook and the controllers, with these flags.
    Operator(Box<RunArgs>),
    /// A command that does its work and exits (see [`execute`]).
    Command(Box<Tool>),
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The default filter: our own crates at `info`, the chatty libraries only when they warn.
pub const DEFAULT_FILTER: &str = "info,kube=warn,kube_runtime=warn,kube_client=warn,hyper=warn,rustls=warn,tower=warn";

/// Whether the binary runs as the kubectl plugin (`kubectl-watcher` on the `PATH`, as
/// `kubectl watcher ...` finds it).
fn is_kubectl_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0).file_name().is_some_and(|name| name.to_string_lossy().starts_with("kubectl-watcher"))
}

impl Cli {
    /// Parses the process's arguments. As the kubectl plugin with no command, `kubectl watcher`
    /// shows the help rather than starting the operator.
    pub fn parse_args() -> Self {
        use clap::CommandFactory;
        let mut args = std::env::args_os();
        let plugin = args.next().is_some_and(|argv0| is_kubectl_plugin(&argv0));
        if plugin && args.next().is_none() {
            let mut command = Self::command().name("kubectl watcher").bin_name("kubectl watcher");
            let _ = command.print_help();
            std::process::exit(0);
        }
        Self::parse()
    }

    /// The log format for this invocation (only `run` has the flag; the others log as text).
    pub fn log_format(&self) -> LogFormat {
        match &self.command {
            Some(Command::Run(args)) => args.log_format,
            None => self.run.log_format,
            Some(Command::Tool(_)) => LogFormat::Text,
        }
    }

    /// The log level when `RUST_LOG` is not set: the diagnostic commands print their own
    /// findings, and the client's own error logs would repeat them.
    pub fn default_log_filter(&self) -> &'static str {
        match &self.command {
            Some(Command::Tool(Tool::Check(_) | Tool::CheckInject(_) | Tool::Rollout(_))) => "off",
            _ => DEFAULT_FILTER,
        }
    }

    /// What this invocation does.
    pub fn job(self) -> Job {
        match self.command {
            None => Job::Operator(Box::new(self.run)),
            Some(Command::Run(args)) => Job::Operator(Box::new(args)),
            Some(Command::Tool(tool)) => Job::Command(Box::new(tool)),
        }
    }
}

#[cfg(test)]
mod tests;
