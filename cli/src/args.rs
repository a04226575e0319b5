//! The command line: `run` (default), `crds`, `inject`, `certs`, `check`, `check-inject`,
//! `rollout`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use crate::offline;

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

/// Flags of `watcher-operator run`; each also reads the environment variable shown.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Address of the HTTPS admission webhook.
    #[arg(long, env = "WATCHER_WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,

    /// Address of `/metrics`: HTTPS, answering only a bearer token that kube-apiserver
    /// authenticates (TokenReview) and allows `get` on `/metrics` (SubjectAccessReview, e.g.
    /// ClusterRole `watcher-operator-metrics-reader`); plain HTTP with `--metrics-secure=false`.
    #[arg(long, env = "WATCHER_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Serve `/metrics` over TLS (the webhook's serving certificate) behind authentication and
    /// authorization. `--metrics-secure=false` serves it over plain HTTP to anyone who reaches
    /// the port, and the operator then needs no `tokenreviews` and `subjectaccessreviews`.
    #[arg(long, env = "WATCHER_METRICS_SECURE", default_value_t = true, action = ArgAction::Set)]
    pub metrics_secure: bool,

    /// Address of the plain-HTTP `/healthz` and `/readyz` (the kubelet's probes): they say
    /// nothing but whether the process lives and is ready.
    #[arg(long, env = "WATCHER_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,

    /// The operator's namespace: its TLS Secret and leader Lease live here, and its pods are
    /// never injected. Default: the namespace of the pod it runs in, else the kubeconfig's.
    #[arg(long, env = "WATCHER_NAMESPACE")]
    pub namespace: Option<String>,

    /// The Service in front of the webhook; the webhook configuration points at it.
    #[arg(long, env = "WATCHER_SERVICE_NAME", default_value = "watcher-operator")]
    pub service_name: String,

    /// Register the webhook by URL instead of by Service (for running outside the cluster),
    /// e.g. `https://127.0.0.1:8443/mutate`.
    #[arg(long, env = "WATCHER_WEBHOOK_URL", value_parser = parse_webhook_url)]
    pub webhook_url: Option<String>,

    /// Controllers to run, comma-separated (default: every controller).
    #[arg(long, env = "WATCHER_CONTROLLERS", value_delimiter = ',', default_value = ALL_CONTROLLERS)]
    pub controllers: Vec<ControllerName>,

    /// Namespaces whose Secrets and ConfigMaps annotated `watcher.dev/sync` are copied into
    /// other namespaces, comma-separated. Default: the operator's namespace.
    #[arg(long, env = "WATCHER_SYNC_NAMESPACES", value_delimiter = ',', value_parser = parse_namespace)]
    pub sync_namespaces: Vec<String>,

    /// Whether the sync controller copies Secrets too (it then reads and writes Secrets in
    /// every namespace). Off by default: ConfigMaps only, and the operator needs no access to
    /// Secrets outside its namespace. Copies made while it was on are left as they are.
    #[arg(long, env = "WATCHER_SYNC_SECRETS", default_value_t = false, action = ArgAction::Set)]
    pub sync_secrets: bool,

    /// Run the controllers only in the replica that holds Lease `watcher-operator`.
    /// `--leader-election=false` runs them in every replica: use it with one replica only.
    #[arg(long, env = "WATCHER_LEADER_ELECTION", default_value_t = true, action = ArgAction::Set)]
    pub leader_election: bool,

    /// Serve this certificate (PEM chain) instead of self-managed ones, reloading it when the
    /// file changes (cert-manager). Needs `--tls-key-file`.
    #[arg(long, env = "WATCHER_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// The private key (PEM) of `--tls-cert-file`.
    #[arg(long, env = "WATCHER_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,

    /// Log format. The level comes from `RUST_LOG` (default `info`).
    #[arg(long, env = "WATCHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// kube-apiserver's Pod Security admission configuration, a file in its own shape (a
    /// `PodSecurityConfiguration`, or the `AdmissionConfiguration` holding one): the levels of
    /// namespaces without Pod Security labels (`defaults`) and what is exempt (`exemptions`).
    /// Without it the defaults are learned from kube-apiserver at start and every hour
    /// (dry-run pods in a namespace without labels); exemptions cannot be seen so.
    #[arg(long, env = "WATCHER_POD_SECURITY_CONFIG", value_name = "FILE", value_parser = parse_pod_security_config)]
    pub pod_security_config: Option<watcher_admission::pod_security::ClusterDefaults>,

    /// The image of `watcher-supervise`: in pods that are meant to end (restartPolicy `Never` or
    /// `OnFailure`), its init container copies the supervisor a sidecar's command runs under,
    /// which ends the command with the app; a regular sidecar that runs another image's
    /// entrypoint is switched to it once the app containers have ended, which ends it. Nodes
    /// must be able to pull it.
    #[arg(long, env = "WATCHER_SUPERVISOR_IMAGE", default_value = watcher_api::DEFAULT_SUPERVISOR_IMAGE, value_parser = parse_image)]
    pub supervisor_image: String,
}

/// An image reference: not empty, no white space, at most as long as a Watcher's may be.
fn parse_image(value: &str) -> Result<String, String> {
    let max = watcher_api::validation::MAX_IMAGE_LENGTH;
    if value.is_empty() || value.len() > max || value.chars().any(char::is_whitespace) {
        return Err(format!("{value:?} is not an image reference (not empty, no spaces, at most {max} characters)"));
    }
    Ok(value.to_owned())
}

fn parse_pod_security_config(value: &str) -> Result<watcher_admission::pod_security::ClusterDefaults, String> {
    crate::pod_security_config::read(std::path::Path::new(value)).map_err(|error| error.to_string())
}

/// Every controller, the default of `--controllers`: an operator installed from `deploy/` (which
/// sets no `WATCHER_CONTROLLERS`) runs them all.
const ALL_CONTROLLERS: &str = "watcher,pods,at,podset,sync,images";

/// A controller that `--controllers` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ControllerName {
    /// Watcher → owned ConfigMap and status.
    Watcher,
    /// Pods → injection drift on each Watcher (and evictions under `Recreate`).
    Pods,
    /// At → one pod at the scheduled time.
    At,
    /// PodSet → N pods.
    Podset,
    /// Secrets and ConfigMaps annotated `watcher.dev/sync` → copies in other namespaces.
    Sync,
    /// ImagePolicy → its status, and workload templates rewritten when it asks.
    Images,
}

/// A namespace name: a DNS label (lower-case letters, digits, `-`, at most 63 characters).
fn parse_namespace(value: &str) -> Result<String, String> {
    let valid = !value.is_empty()
        && value.len() <= 63
        && value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if valid { Ok(value.to_owned()) } else { Err(format!("{value:?} is not a namespace name")) }
}

/// `KEY=VALUE,...`, each a label kube-apiserver would take.
pub(crate) fn parse_labels(value: &str) -> Result<BTreeMap<String, String>, String> {
    use watcher_api::validation::{is_label_key, is_label_value};
    let mut labels = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not KEY=VALUE"));
        };
        if !is_label_key(key) {
            return Err(format!("{key:?} is not a label key"));
        }
        if !is_label_value(value) {
            return Err(format!("{value:?} (label {key}) is not a label value"));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// `https://HOST[:PORT]/PATH`: kube-apiserver calls webhooks over HTTPS only.
fn parse_webhook_url(value: &str) -> Result<String, String> {
    let uri: http::Uri = value.parse().map_err(|error| format!("not a URL: {error}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("the webhook URL must start with https://".into());
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("the webhook URL needs a host".into());
    }
    Ok(value.to_owned())
}

/// `watcher-operator run ARGS` as parsed (with the environment's `WATCHER_...` variables).
pub fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
    let cli = Cli::try_parse_from(["watcher-operator", "run"].iter().chain(args))?;
    match cli.job() {
        Job::Operator(run) => Ok(*run),
        Job::Command(_) => Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand)),
    }
}

/// What an operator's container runs with, of the options other commands ask about: its
/// controllers and the supervisor's image.
#[derive(Debug, PartialEq)]
pub struct DeployedOptions {
    /// `--controllers`.
    pub controllers: Vec<ControllerName>,
    /// `--supervisor-image`.
    pub supervisor_image: String,
}

/// The options of an operator container with these `args` and `env` (a Deployment's): each as
/// its args set it, else its variable in `env` (never this process's), else its default; read
/// through the options' own definitions (their flag, variable, default and parser).
pub fn deployed_options(args: &[String], env: &BTreeMap<String, String>) -> Result<DeployedOptions, clap::Error> {
    const WANTED: [&str; 2] = ["controllers", "supervisor_image"];
    let run = RunArgs::augment_args(clap::Command::new("run"));
    let mut command = clap::Command::new("run").no_binary_name(true);
    let mut argv: Vec<String> = Vec::new();
    for option in run.get_arguments().filter(|a| WANTED.contains(&a.get_id().as_str())) {
        let Some(long) = option.get_long() else { continue };
        let flag = format!("--{long}");
        let mut given = false;
        let mut tokens = args.iter();
        while let Some(token) = tokens.next() {
            if token.strip_prefix(&flag).is_some_and(|rest| rest.starts_with('=')) {
                argv.push(token.clone());
                given = true;
            } else if *token == flag {
                argv.extend([token.clone()].into_iter().chain(tokens.next().cloned()));
                given = true;
            }
        }
        let variable = option.get_env().and_then(|name| name.to_str()).and_then(|name| env.get(name));
        if let Some(value) = variable.filter(|_| !given) {
            argv.push(format!("{flag}={value}"));
        }
        command = command.arg(option.clone().env(None::<&str>));
    }
    let matches = command.try_get_matches_from(argv)?;
    let controllers = matches.get_many::<ControllerName>("controllers").into_iter().flatten().copied().collect();
    let supervisor_image = matches.get_one::<String>("supervisor_image").cloned().unwrap_or_default();
    Ok(DeployedOptions { controllers, supervisor_image })
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

/// Runs `tool` (`run` is the operator: [`Job::Operator`]); `Ok(false)`: it ran, and says
/// something failed (exit code 1).
pub async fn execute(tool: Tool) -> anyhow::Result<bool> {
    match tool {
        Tool::Crds => {
            print!("{}", offline::crds_yaml()?);
            Ok(true)
        }
        Tool::Check(args) => check(args).await,
        Tool::CheckInject(args) => check_inject(args).await,
        Tool::Rollout(command) => rollout(command).await,
        Tool::Inject(args) => {
            let namespace = args.namespace.as_deref();
            let labels = args.namespace_labels.unwrap_or_default();
            let pod_security = args.pod_security_config.unwrap_or_default();
            let resources = offline::resource_rules(&args.limit_ranges, &args.resource_quotas)?;
            let preview = offline::inject_preview(
                &args.pods,
                &args.watchers,
                &args.image_policies,
                offline::Namespace {
                    name: namespace,
                    labels: &labels,
                    pod_security: &pod_security,
                    resources: &resources,
                },
                args.native_sidecars,
            )?;
            print!("{preview}");
            Ok(true)
        }
        Tool::Certs(args) => {
            offline::write_certs(&args.service, &args.namespace, &args.hosts, &args.out_dir, args.days).map(|()| true)
        }
    }
}

/// `check`: the report, as text or JSON; whether every check passed.
async fn check(args: CheckArgs) -> anyhow::Result<bool> {
    let client = args.cluster.client().await?;
    let options =
        crate::check::CheckOptions { namespace: args.namespace, probe_namespace: args.probe_namespace, pre: args.pre };
    let report = crate::check::check(&client, &options).await;
    match args.output {
        Output::Text => print!("{}", report.text()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report.json())?),
    }
    Ok(report.ok())
}

/// `check-inject`: the explanation of a pod or a manifest, as text or JSON.
async fn check_inject(args: CheckInjectArgs) -> anyhow::Result<bool> {
    let client = args.cluster.client().await?;
    let target = match (args.pod, args.filename) {
        (Some(pod), _) => crate::check::inject::Target::Pod(pod),
        (None, Some(path)) => crate::check::inject::Target::Manifest(path),
        (None, None) => anyhow::bail!("name a pod, or a manifest with -f"),
    };
    let explanation = crate::check::inject::check_inject(
        &client,
        &target,
        args.namespace.as_deref(),
        args.operator_namespace.as_deref(),
    )
    .await?;
    match args.output {
        Output::Text => print!("{}", explanation.text()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
    }
    Ok(true)
}

/// `rollout status|pause|resume|history|undo`.
async fn rollout(command: RolloutCommand) -> anyhow::Result<bool> {
    use crate::rollout;
    match command {
        RolloutCommand::Status(args) => {
            let (client, target) = args.target.client().await?;
            let timeout = Some(args.timeout).filter(|t| !t.is_zero());
            rollout::status(&client, &target, timeout).await
        }
        RolloutCommand::Pause(args) => {
            let (client, target) = args.client().await?;
            rollout::set_paused(&client, &target, true).await.map(|()| true)
        }
        RolloutCommand::Resume(args) => {
            let (client, target) = args.client().await?;
            rollout::set_paused(&client, &target, false).await.map(|()| true)
        }
        RolloutCommand::History(args) => {
            let (client, target) = args.client().await?;
            rollout::print_history(&client, &target).await.map(|()| true)
        }
        RolloutCommand::Undo(args) => {
            let (client, target) = args.target.client().await?;
            rollout::undo(&client, &target, args.to_revision).await.map(|()| true)
        }
    }
}

/// An error and its sources, `: `-separated, without repeats.
pub fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
