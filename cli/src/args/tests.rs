use super::*;
use clap::CommandFactory;

#[test]
fn every_cause_is_said_once() {
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
    let error =
        anyhow::Error::new(io).context("failed to read kubeconfig: No such file or directory").context("no cluster");
    assert_eq!(causes(error.as_ref()), "no cluster: failed to read kubeconfig: No such file or directory");
}

#[test]
fn the_kubectl_plugin_is_known_by_its_name() {
    assert!(is_kubectl_plugin("/usr/local/bin/kubectl-watcher".as_ref()));
    assert!(is_kubectl_plugin("kubectl-watcher".as_ref()));
    assert!(!is_kubectl_plugin("/usr/local/bin/watcher-operator".as_ref()));
    let cli = Cli::try_parse_from(["kubectl-watcher", "check-inject", "app", "-n", "team-a", "--context", "kind"])
        .expect("kubectl's flags");
    assert!(matches!(cli.command, Some(Command::Tool(Tool::CheckInject(_)))));
    let cli =
        Cli::try_parse_from(["kubectl-watcher", "check", "--pre", "-o", "json", "--kubeconfig", "/k"]).expect("parses");
    assert!(matches!(cli.command, Some(Command::Tool(Tool::Check(CheckArgs { pre: true, output: Output::Json, .. })))));
    assert!(Cli::try_parse_from(["kubectl-watcher", "check-inject"]).is_err(), "a pod or -f is needed");
    assert!(Cli::try_parse_from(["kubectl-watcher", "check-inject", "app", "-f", "pod.yaml"]).is_err(), "not both");
}

#[test]
fn no_subcommand_means_run_with_documented_defaults() {
    let cli = Cli::try_parse_from(["watcher-operator"]).expect("parses");
    assert!(cli.command.is_none());
    let run = cli.run;
    assert_eq!(run.webhook_addr, "0.0.0.0:8443".parse().expect("addr"));
    assert_eq!(run.metrics_addr, "0.0.0.0:8080".parse().expect("addr"));
    assert_eq!(run.health_addr, "0.0.0.0:8081".parse().expect("addr"));
    assert!(run.metrics_secure, "metrics are served behind authentication by default");
    assert!(!run.sync_secrets, "Secrets are synced only when asked");
    assert_eq!(run.service_name, "watcher-operator");
    assert!(run.leader_election);
    assert_eq!(run.controllers, ControllerName::value_variants(), "every controller runs by default");
}

/// The `run` arguments of the installed operator: the Deployment's `args`, plus every
/// environment variable it sets with a literal value, as the flag that reads it.
fn deployed_run_args() -> Vec<String> {
    let text = include_str!("../../../deploy/deployment.yaml");
    let deployment: serde_json::Value = serde_saphyr::from_str(text).expect("deployment.yaml is YAML");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut args = vec!["watcher-operator".to_owned()];
    args.extend(container["args"].as_array().into_iter().flatten().filter_map(|a| a.as_str()).map(str::to_owned));
    let command = Cli::command();
    let run = command.find_subcommand("run").expect("run subcommand");
    for env in container["env"].as_array().into_iter().flatten() {
        let (Some(name), Some(value)) = (env["name"].as_str(), env["value"].as_str()) else { continue };
        if let Some(arg) = run.get_arguments().find(|a| a.get_env().is_some_and(|e| e == name)) {
            args.push(format!("--{}={value}", arg.get_long().expect("long flag")));
        }
    }
    args
}

#[test]
fn the_installed_operator_runs_every_controller() {
    let args = deployed_run_args();
    let cli = Cli::try_parse_from(&args).expect("the deployment's arguments parse");
    let Some(Command::Run(run)) = cli.command else { panic!("deploy/ runs `run`: {args:?}") };
    assert_eq!(run.controllers, ControllerName::value_variants(), "{args:?}");
    assert!(run.leader_election, "two replicas need leader election");
}

/// docs/configuration.md's flag table is the documentation of `run`: every flag is in it,
/// with its environment variable and the default clap applies.
#[test]
fn the_flag_table_matches_the_parser() {
    let readme = include_str!("../../../docs/configuration.md");
    let rows: Vec<Vec<&str>> = readme
        .lines()
        .filter(|line| line.starts_with("| `--"))
        .map(|line| line.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    let command = Cli::command();
    let run = command.find_subcommand("run").expect("run subcommand");
    let flags: Vec<_> = run.get_arguments().filter(|a| a.get_long().is_some_and(|l| l != "help")).collect();
    for arg in &flags {
        let long = arg.get_long().expect("long flag");
        let row = rows
            .iter()
            .find(|row| row[0] == format!("`--{long}`"))
            .unwrap_or_else(|| panic!("docs/configuration.md documents no --{long}"));
        let env = arg.get_env().map(|e| format!("`{}`", e.to_string_lossy()));
        assert_eq!(Some(row[1].to_owned()), env, "--{long}: environment variable");
        let defaults: Vec<_> = arg.get_default_values().iter().map(|v| v.to_string_lossy()).collect();
        if !defaults.is_empty() {
            assert_eq!(row[2], format!("`{}`", defaults.join(",")), "--{long}: default");
        }
    }
    assert_eq!(rows.len(), flags.len(), "docs/configuration.md documents a flag `run` does not have");
}

#[test]
fn flags_parse_and_bad_values_are_refused() {
    let cli = Cli::try_parse_from([
        "watcher-operator",
        "run",
        "--controllers=watcher,at",
        "--leader-election=false",
        "--webhook-url=https://127.0.0.1:9443/mutate",
        "--sync-namespaces=watcher-system,platform",
    ])
    .expect("parses");
    let Some(Command::Run(run)) = cli.command else { panic!("run subcommand") };
    assert_eq!(run.controllers, [ControllerName::Watcher, ControllerName::At]);
    assert!(!run.leader_election);
    assert_eq!(run.webhook_url.as_deref(), Some("https://127.0.0.1:9443/mutate"));
    assert_eq!(run.sync_namespaces, ["watcher-system", "platform"]);

    for bad in [
        &["watcher-operator", "--controllers=watcher,nope"][..],
        &["watcher-operator", "--webhook-url=http://127.0.0.1/mutate"],
        &["watcher-operator", "--webhook-addr=localhost"],
        &["watcher-operator", "--leader-election=maybe"],
        &["watcher-operator", "--sync-namespaces=Team_A"],
        &["watcher-operator", "--sync-namespaces=a,,b"],
    ] {
        assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} must be refused");
    }
}

#[test]
fn tls_files_come_in_pairs_and_subcommands_parse() {
    assert!(Cli::try_parse_from(["watcher-operator", "--tls-cert-file=/x.crt"]).is_err());
    assert!(Cli::try_parse_from(["watcher-operator", "--tls-cert-file=/x.crt", "--tls-key-file=/x.key"]).is_ok());
    assert!(
        Cli::try_parse_from(["watcher-operator", "inject", "-f", "pod.yaml"]).is_err(),
        "--watcher or --image-policy is required"
    );
    assert!(Cli::try_parse_from(["watcher-operator", "inject", "-f", "pod.yaml", "--image-policy", "p.yaml"]).is_ok());
    let cli =
        Cli::try_parse_from(["watcher-operator", "inject", "-f", "-", "--watcher", "a.yaml", "--watcher", "b.yaml"])
            .expect("parses");
    let Some(Command::Tool(Tool::Inject(args))) = cli.command else { panic!("inject") };
    assert_eq!(args.watchers.len(), 2);
    assert!(Cli::try_parse_from(["watcher-operator", "certs"]).is_err(), "--out-dir is required");
}

#[test]
fn crds_yaml_is_five_documents() {
    let yaml = crate::offline::crds_yaml().expect("serialises");
    assert_eq!(yaml.matches("---\n").count(), 5);
    assert!(yaml.contains("name: watchers.watcher.dev"));
}

/// A Deployment's options are read as its container has them: args first, then its `env`,
/// then the default; never the variables of the process that reads them.
#[test]
fn deployed_options_come_from_the_containers_args_and_env() {
    use std::collections::BTreeMap;
    let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    let args = |list: &[&str]| -> Vec<String> { list.iter().map(|a| (*a).to_owned()).collect() };
    let defaults = deployed_options(&args(&["--namespace=watcher-system"]), &env(&[])).expect("defaults");
    assert_eq!(defaults.controllers.len(), 6);
    assert_eq!(defaults.supervisor_image, watcher_api::DEFAULT_SUPERVISOR_IMAGE);
    let from_env = deployed_options(&[], &env(&[("WATCHER_CONTROLLERS", "watcher,at")])).expect("env");
    assert_eq!(from_env.controllers, [ControllerName::Watcher, ControllerName::At]);
    let both = deployed_options(
        &args(&["--controllers", "pods", "--supervisor-image=mirror.example/watcher-supervise:0.1.0"]),
        &env(&[("WATCHER_CONTROLLERS", "watcher"), ("WATCHER_SUPERVISOR_IMAGE", "ignored:1")]),
    )
    .expect("args win");
    assert_eq!(both.controllers, [ControllerName::Pods]);
    assert_eq!(both.supervisor_image, "mirror.example/watcher-supervise:0.1.0");
    assert!(deployed_options(&args(&["--controllers=nonsense"]), &env(&[])).is_err());
}
