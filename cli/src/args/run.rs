//! `watcher-operator run`: the operator's flags, the controllers they name, and the options of
//! a deployed operator read through the same definitions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, ValueEnum};

use super::values::{parse_image, parse_namespace, parse_pod_security_config, parse_webhook_url};
use super::{Cli, Job, LogFormat};

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
