//! The commands that do their work and exit: each [`Tool`] run, and an error said with its
//! causes.

use super::{CheckArgs, CheckInjectArgs, Output, RolloutCommand, Tool};
use crate::offline;

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
