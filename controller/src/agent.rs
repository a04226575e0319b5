//! A Watcher whose sidecar is watcher-agent: its configuration judged by the agent's own code
//! before any pod (the agent would refuse to start with the same words), said by the condition
//! `AgentConfigured`; `Unknown`, naming the variable, where what the agent will read is known
//! only in the pod. A Watcher whose sidecar is another image has no such condition.

use watcher_agent::Refusal;
use watcher_agent::config::Config;
use watcher_api::{Condition, WatcherSpec, condition, types};

/// What the agent of a Watcher's sidecar is given, as far as the Watcher says it before a pod.
#[derive(Debug, Default, PartialEq)]
pub struct AgentEnvironment {
    /// The Watcher's `configData` (its ConfigMap, through `envFrom`), then the container's own
    /// `env`, which wins; a variable outside the agent's (`POD_NAME`) from `valueFrom` stands as
    /// set.
    pub vars: Vec<(String, String)>,
    /// Names outside the agent's carried from the app container (`transferEnv`): set where the
    /// app has them.
    pub carried: Vec<String>,
    /// The first way a variable of the agent's (`AGENT_…`) reaches the sidecar with a value
    /// known only in the pod: `valueFrom`, an `envFrom` of the container's own, `transferEnv`.
    pub unknowable: Option<String>,
}

/// How the agent of a Watcher will take its configuration.
#[derive(Debug)]
pub enum Judgement {
    /// It starts with this configuration.
    Takes(Box<Config>),
    /// It refuses to start, and says this.
    Refuses(Refusal),
    /// What it will read is known only in the pod: why.
    CannotKnow(String),
}

/// The environment the agent of `spec`'s sidecar will read; `None` where the sidecar is not
/// watcher-agent.
pub fn agent_environment(spec: &WatcherSpec) -> Option<AgentEnvironment> {
    let container = &spec.container;
    if !container.image.as_deref().is_some_and(watcher_api::image::is_agent_image) {
        return None;
    }
    let ours = |name: &str| name.starts_with("AGENT_");
    let mut environment = AgentEnvironment::default();
    let mut unknowable = |why: String| {
        environment.unknowable.get_or_insert(why);
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        let (kind, name) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(map), _) => ("ConfigMap", map.name.as_str()),
            (None, Some(secret)) => ("Secret", secret.name.as_str()),
            (None, None) => continue,
        };
        if "AGENT_".starts_with(prefix) || ours(prefix) {
            unknowable(format!("the container's envFrom {kind} {name} may set AGENT_ variables, read only in the pod"));
        }
    }
    let mut vars: Vec<(String, String)> = spec.config_data.clone().unwrap_or_default().into_iter().collect();
    for env in container.env.iter().flatten() {
        let value = match (&env.value, &env.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(_)) if ours(&env.name) => {
                unknowable(format!("{} is set by valueFrom: its value is known only in the pod", env.name));
                continue;
            }
            (None, Some(_)) => format!("<{} from valueFrom>", env.name),
            (None, None) => String::new(),
        };
        vars.retain(|(k, _)| *k != env.name);
        vars.push((env.name.clone(), value));
    }
    let defined = |name: &str| container.env.iter().flatten().any(|e| e.name == name);
    for name in spec.app.transfer_env.iter().flat_map(|t| &t.names).filter(|n| !defined(n)) {
        if ours(name) {
            unknowable(format!(
                "{name} is carried from the app container (transferEnv): its value is known only in the pod"
            ));
        } else {
            environment.carried.push(name.clone());
        }
    }
    environment.vars = vars;
    Some(environment)
}

/// The agent's configuration as `spec` gives it, judged by the agent ([`watcher_agent::judge`]);
/// `None` where the sidecar is not watcher-agent.
pub fn agent_configuration(spec: &WatcherSpec) -> Option<Judgement> {
    let environment = agent_environment(spec)?;
    if let Some(why) = environment.unknowable {
        return Some(Judgement::CannotKnow(why));
    }
    let refusal = match watcher_agent::judge(environment.vars.clone()) {
        Ok(config) => return Some(Judgement::Takes(Box::new(config))),
        Err(refusal) => refusal,
    };
    if environment.carried.is_empty() {
        return Some(Judgement::Refuses(refusal));
    }
    // Refused without the carried variables: with them, as where the app has them.
    let carried = environment.carried.iter().map(|name| (name.clone(), format!("<{name} from the app>")));
    let with_carried = environment.vars.into_iter().chain(carried);
    Some(match watcher_agent::judge(with_carried) {
        Ok(_) => Judgement::CannotKnow(format!(
            "the agent starts only where the app container has {} (transferEnv), known only in the pod; without: \
             {refusal}",
            environment.carried.join(", ")
        )),
        Err(refusal) => Judgement::Refuses(refusal),
    })
}

/// `AgentConfigured`: `True` where the agent takes its configuration, `False`
/// (`InvalidConfiguration`, in the agent's words) where it would refuse to start, `Unknown`
/// (`KnownInThePod`, naming the variable) where that depends on the pod; `None` where the
/// sidecar is not watcher-agent.
pub fn agent_condition(spec: &WatcherSpec, generation: Option<i64>) -> Option<Condition> {
    Some(match agent_configuration(spec)? {
        Judgement::Takes(_) => {
            condition(types::AGENT_CONFIGURED, true, "Valid", "watcher-agent takes its configuration", generation)
        }
        Judgement::Refuses(refusal) => condition(
            types::AGENT_CONFIGURED,
            false,
            "InvalidConfiguration",
            format!("watcher-agent would refuse to start: {refusal}"),
            generation,
        ),
        Judgement::CannotKnow(why) => Condition {
            status: "Unknown".to_owned(),
            ..condition(types::AGENT_CONFIGURED, false, "KnownInThePod", why, generation)
        },
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
    use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector};

    use super::*;

    fn sample() -> WatcherSpec {
        let watcher: watcher_api::Watcher =
            serde_saphyr::from_str(include_str!("../../deploy/samples/app-values-watcher.yaml")).expect("sample");
        watcher.spec
    }

    fn status_of(spec: &WatcherSpec) -> (String, String, String) {
        let c = agent_condition(spec, None).expect("an agent");
        (c.status, c.reason, c.message)
    }

    fn from_field(name: &str) -> EnvVar {
        let field = ObjectFieldSelector { field_path: "metadata.annotations['x']".into(), ..Default::default() };
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource { field_ref: Some(field), ..Default::default() }),
            ..Default::default()
        }
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
        env_wins.container.env.get_or_insert_default().push(EnvVar {
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

    /// A variable of the agent's whose value only the pod knows: `Unknown`, naming it, never a
    /// refusal read from a placeholder (a count, a duration or a URL set by `valueFrom`).
    #[test]
    fn what_only_the_pod_knows_is_unknown_and_named() {
        for name in ["AGENT_MAX_SERIES", "AGENT_ROTATE_WAIT", "AGENT_ALERTMANAGER_URL"] {
            let mut spec = sample();
            spec.container.env.get_or_insert_default().push(from_field(name));
            let (status, reason, message) = status_of(&spec);
            assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "KnownInThePod"), "{name}: {message}");
            assert_eq!(message, format!("{name} is set by valueFrom: its value is known only in the pod"));
        }
        // The downward API for the pod's identity stands as set: the log stream needs it.
        assert_eq!(status_of(&sample()).0, "True");

        let mut env_from = sample();
        env_from.container.env_from = Some(vec![EnvFromSource {
            config_map_ref: Some(k8s_openapi::api::core::v1::ConfigMapEnvSource {
                name: "extra".into(),
                optional: None,
            }),
            ..Default::default()
        }]);
        let (status, _, message) = status_of(&env_from);
        assert_eq!(status, "Unknown");
        assert!(message.contains("envFrom ConfigMap extra"), "{message}");
        // A prefix that no variable of the agent's can have: nothing unknown.
        env_from.container.env_from.as_mut().expect("set")[0].prefix = Some("APP_".into());
        assert_eq!(status_of(&env_from).0, "True");

        let mut carried = sample();
        carried.app.transfer_env =
            vec![serde_json::from_value(serde_json::json!({"names": ["AGENT_START"]})).expect("transferEnv")];
        let (status, _, message) = status_of(&carried);
        assert_eq!(status, "Unknown");
        assert!(message.starts_with("AGENT_START is carried from the app container"), "{message}");
    }

    /// The pod's name carried from the app: where the agent needs it, whether it starts depends
    /// on the app; where it does not, it starts.
    #[test]
    fn a_carried_variable_the_agent_needs_is_unknown() {
        let mut spec = sample();
        let env = spec.container.env.get_or_insert_default();
        env.retain(|e| e.name != "POD_NAME");
        spec.config_data.get_or_insert_default().insert("AGENT_LOGS_CONTAINER".into(), "app".into());
        assert_eq!(status_of(&spec).0, "False", "no POD_NAME at all: refused");
        spec.app.transfer_env =
            vec![serde_json::from_value(serde_json::json!({"names": ["POD_NAME"]})).expect("transferEnv")];
        let (status, _, message) = status_of(&spec);
        assert_eq!(status, "Unknown", "{message}");
        assert!(message.contains("has POD_NAME (transferEnv)") && message.contains("without: POD_NAME"), "{message}");
    }

    /// Rules that each compile but not together: the agent's start refuses them, and so does the
    /// condition.
    #[test]
    fn rules_that_do_not_compile_together_are_refused() {
        let mut spec = sample();
        let data = spec.config_data.get_or_insert_default();
        // Each a small part of the regex crate's size limit alone (a Unicode `\w` is large);
        // together past it.
        for i in 0..40 {
            data.insert(format!("AGENT_RULE_BIG{i}"), format!(r"\w{{12}}x{i}"));
        }
        let (status, reason, message) = status_of(&spec);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidConfiguration"), "{message}");
        assert!(message.contains("the rules do not compile together"), "{message}");
    }
}
