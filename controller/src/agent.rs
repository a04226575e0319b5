//! A Watcher whose sidecar is watcher-agent: its configuration judged by the agent's own code
//! before any pod (the agent would refuse to start with the same words), said by the condition
//! `AgentConfigured`. A Watcher whose sidecar is another image has no such condition.

use watcher_agent::config::{Config, ConfigError};
use watcher_api::{Condition, WatcherSpec, condition, types};

/// The variables the agent of `spec`'s sidecar will read: the Watcher's `configData` (its
/// ConfigMap, through `envFrom`), then the container's own `env`, which wins (a variable from
/// `valueFrom` stands as set); `None` where the sidecar is not watcher-agent.
pub fn agent_variables(spec: &WatcherSpec) -> Option<Vec<(String, String)>> {
    let container = &spec.container;
    if !container.image.as_deref().is_some_and(watcher_api::image::is_agent_image) {
        return None;
    }
    let mut vars: Vec<(String, String)> = spec.config_data.clone().unwrap_or_default().into_iter().collect();
    for env in container.env.iter().flatten() {
        let value = match (&env.value, &env.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(_)) => format!("<{} from valueFrom>", env.name),
            (None, None) => String::new(),
        };
        vars.retain(|(k, _)| *k != env.name);
        vars.push((env.name.clone(), value));
    }
    Some(vars)
}

/// The agent's configuration as `spec` gives it, parsed by the agent; `None` where the sidecar
/// is not watcher-agent.
pub fn agent_configuration(spec: &WatcherSpec) -> Option<Result<Config, ConfigError>> {
    agent_variables(spec).map(Config::from_vars)
}

/// `AgentConfigured`: `True` where the agent takes its configuration, `False`
/// (`InvalidConfiguration`, in the agent's words) where it would refuse to start; `None` where
/// the sidecar is not watcher-agent.
pub fn agent_condition(spec: &WatcherSpec, generation: Option<i64>) -> Option<Condition> {
    Some(match agent_configuration(spec)? {
        Ok(_) => condition(types::AGENT_CONFIGURED, true, "Valid", "watcher-agent takes its configuration", generation),
        Err(error) => condition(
            types::AGENT_CONFIGURED,
            false,
            "InvalidConfiguration",
            format!("watcher-agent would refuse to start: {error}"),
            generation,
        ),
    })
}

/// Sets or takes away `AgentConfigured` in `conditions`, as `spec` says.
pub fn set_agent_condition(conditions: &mut Vec<Condition>, spec: &WatcherSpec, generation: Option<i64>) {
    match agent_condition(spec, generation) {
        Some(condition) => watcher_api::set_condition(conditions, condition),
        None => conditions.retain(|c| c.type_ != types::AGENT_CONFIGURED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WatcherSpec {
        let watcher: watcher_api::Watcher =
            serde_saphyr::from_str(include_str!("../../deploy/samples/app-values-watcher.yaml")).expect("sample");
        watcher.spec
    }

    #[test]
    fn the_agents_configuration_is_judged_before_any_pod() {
        let spec = sample();
        let valid = agent_condition(&spec, Some(2)).expect("an agent");
        assert_eq!((valid.status.as_str(), valid.reason.as_str()), ("True", "Valid"));
        let mut broken = spec.clone();
        broken.config_data.get_or_insert_default().insert("AGENT_BUCKETS_LATENCY".into(), "1,0.5".into());
        let refused = agent_condition(&broken, Some(3)).expect("an agent");
        assert_eq!((refused.status.as_str(), refused.reason.as_str()), ("False", "InvalidConfiguration"));
        assert_eq!(
            refused.message,
            "watcher-agent would refuse to start: AGENT_BUCKETS_LATENCY: \"1,0.5\": the buckets must be strictly \
             increasing"
        );
        assert_eq!(refused.observed_generation, Some(3));
        // The container's env wins over configData.
        let mut env_wins = broken.clone();
        env_wins.container.env.get_or_insert_default().push(k8s_openapi::api::core::v1::EnvVar {
            name: "AGENT_BUCKETS_LATENCY".into(),
            value: Some("0.5,1".into()),
            ..Default::default()
        });
        assert_eq!(agent_condition(&env_wins, None).map(|c| c.status), Some("True".to_owned()));
        // Another image: no condition, and one set before is taken away.
        let mut busybox = spec;
        busybox.container.image = Some("busybox:1.36".into());
        let mut conditions = vec![refused];
        set_agent_condition(&mut conditions, &busybox, Some(4));
        assert!(conditions.is_empty());
    }
}
