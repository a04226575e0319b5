//! A configuration read again while the agent runs: the Watcher's ConfigMap mounted at
//! `AGENT_CONFIG_DIR` is looked at every [`CONFIG_POLL`]; a change is judged whole, exactly as
//! at start ([`crate::compile`]), and a configuration the agent takes is swapped in whole
//! ([`Live::swap`]): each reader counts with it from its next batch, so no line is lost or
//! counted twice. A refused one (a pattern that does not compile, a file half-written or
//! unreadable) leaves the last good one running. Either is said: in the log,
//! `watcher_agent_config_reloads_total{result}`, `watcher_agent_config_info{hash}` and an Event on
//! the pod (`ConfigApplied`, or Warning `ConfigRefused` naming the variable).
//!
//! A reload takes the rules, their alerts and the formats. The sources, endpoints and sinks
//! (`AGENT_FILES`, `AGENT_LISTEN`, ...) are set up once: a change of them is taken at the next
//! start, and the reload says which.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::dir::{self, DirError, Files, Sources};
use crate::pipeline::{Compiled, Live};

/// How often the configuration directory is looked at.
pub(crate) const CONFIG_POLL: Duration = Duration::from_secs(2);

/// What a look at the configuration directory found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing new (the directory as before, or the same variables).
    Unchanged,
    /// A new configuration runs, with this hash; these variables changed too, and are taken at
    /// the next start.
    Applied {
        /// The hash of its variables.
        hash: String,
        /// The variables a reload does not take.
        restart_only: Vec<&'static str>,
    },
    /// The new configuration is refused, for this reason (naming the variable): the last good
    /// one runs on.
    Refused(String),
}

impl Outcome {
    /// The Event that says it: Warning or not, its reason, its note.
    pub(crate) fn event(&self) -> Option<(bool, &'static str, String)> {
        match self {
            Self::Unchanged => None,
            Self::Applied { hash, restart_only } => Some((false, "ConfigApplied", applied_note(hash, restart_only))),
            Self::Refused(why) => Some((
                true,
                "ConfigRefused",
                format!("the new configuration is refused, the last good one runs on: {why}"),
            )),
        }
    }
}

fn applied_note(hash: &str, restart_only: &[&str]) -> String {
    let mut note = format!("configuration {hash} applied: rules, alerts and formats taken without a restart");
    if !restart_only.is_empty() {
        note.push_str(&format!("; taken at the next start: {}", restart_only.join(", ")));
    }
    note
}

/// The configuration directory and what the agent runs.
pub(crate) struct Reloader {
    dir: PathBuf,
    sources: Sources,
    live: Arc<Live>,
    /// What the directory held at the last look, or why it could not be read.
    last: Option<Result<Files, DirError>>,
    /// The hash of the configuration that runs.
    running: String,
}

impl Reloader {
    /// Follows `AGENT_CONFIG_DIR` of the configuration that runs in `live`, which the agent's
    /// `environment` gave; `None` where the directory does not exist.
    pub(crate) fn new(live: &Arc<Live>, environment: Vec<(OsString, OsString)>) -> Option<Self> {
        let dir = live.current().config.config_dir.clone();
        let at_start = dir::read(&dir)?;
        let sources = Sources::new(environment.iter().cloned(), at_start.as_ref().unwrap_or(&Files::new()));
        let running = dir::hash(&environment);
        live.current().metrics.running(&running);
        Some(Self { dir, sources, live: live.clone(), last: None, running })
    }

    /// The hash of the configuration that runs.
    pub(crate) fn running(&self) -> &str {
        &self.running
    }

    /// Looks at the directory: a change judged whole, and swapped in or refused.
    pub(crate) fn look(&mut self) -> Outcome {
        let Some(read) = dir::read(&self.dir) else { return Outcome::Unchanged };
        if self.last.as_ref() == Some(&read) {
            return Outcome::Unchanged;
        }
        self.last = Some(read.clone());
        let files = match read {
            Ok(files) => files,
            Err(error) => return self.refuse(error.to_string()),
        };
        let vars = self.sources.vars(&files);
        let hash = dir::hash(&vars);
        if hash == self.running {
            return Outcome::Unchanged;
        }
        let (config, rules) = match crate::compile(vars) {
            Ok(compiled) => compiled,
            Err(refusal) => return self.refuse(refusal.to_string()),
        };
        let current = self.live.current();
        let restart_only = current.config.restart_only_changes(&config);
        let config = current.config.reloaded(config);
        let metrics = Arc::new(current.metrics.reconfigured(&config.rules));
        self.live.swap(Compiled { config, rules, metrics: metrics.clone() });
        metrics.running(&hash);
        metrics.reloaded(true);
        self.running.clone_from(&hash);
        Outcome::Applied { hash, restart_only }
    }

    fn refuse(&self, why: String) -> Outcome {
        self.live.current().metrics.reloaded(false);
        Outcome::Refused(why)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use crate::metrics::Registry;

    use super::*;
    use crate::metrics::{Metrics, openmetrics};
    use crate::sinks::alerts::AlertBook;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("watcher-agent-reload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory");
        dir
    }

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(n, v)| ((*n).into(), (*v).into())).collect()
    }

    /// The agent as started with `environment`, following `dir`.
    fn started(dir: &std::path::Path, environment: &[(&str, &str)]) -> (Registry, Arc<Live>, Reloader) {
        let mut environment = os(environment);
        environment.push(("AGENT_CONFIG_DIR".into(), dir.as_os_str().to_owned()));
        let (config, rules) = crate::compile(environment.clone()).expect("a configuration");
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry, &["stdout".into()], &config.rules, 100));
        let alerts = Arc::new(Mutex::new(AlertBook::new(&config.rules)));
        let live = Live::new(Compiled { config, rules, metrics }, alerts);
        let reloader = Reloader::new(&live, environment).expect("the directory is there");
        (registry, live, reloader)
    }

    /// A rule added, then a pattern that does not compile (refused, the last good one runs on),
    /// then a file that is not text (refused), then fixed; each said once.
    #[test]
    fn a_change_is_judged_whole_and_a_refused_one_leaves_the_last_good_one() {
        let dir = scratch("judged");
        let write = |name: &str, value: &[u8]| std::fs::write(dir.join(name), value).expect("written");
        write("AGENT_RULE_ERROR", b"ERROR");
        let environment = [("AGENT_LOGS_CONTAINER", "app"), ("POD_NAME", "shop"), ("POD_NAMESPACE", "default")];
        let mut environment = environment.to_vec();
        environment.push(("AGENT_RULE_ERROR", "ERROR"));
        let (registry, live, mut reloader) = started(&dir, &environment);
        assert_eq!(reloader.look(), Outcome::Unchanged, "the directory as the environment had it");

        write("AGENT_RULE_PANIC", b"panic");
        let Outcome::Applied { hash, restart_only } = reloader.look() else { panic!("applied") };
        assert!(restart_only.is_empty());
        assert_eq!(live.current().config.rules.len(), 2);
        assert_eq!(live.generation(), 1);
        assert_eq!(reloader.look(), Outcome::Unchanged, "said once");

        write("AGENT_RULE_PANIC", b"(panic");
        let refused = reloader.look();
        let Outcome::Refused(why) = &refused else { panic!("refused: {refused:?}") };
        assert!(why.starts_with("AGENT_RULE_PANIC: "), "{why}");
        assert_eq!(live.generation(), 1, "the last good one runs on");
        assert!(refused.event().is_some_and(|(warning, reason, _)| warning && reason == "ConfigRefused"));

        write("AGENT_RULE_PANIC", &[0xff]);
        assert!(matches!(reloader.look(), Outcome::Refused(why) if why.starts_with("AGENT_RULE_PANIC: the file ")));

        write("AGENT_RULE_PANIC", b"panic|fatal");
        write("AGENT_FILES", b"/var/log/*.log");
        let Outcome::Applied { restart_only, .. } = reloader.look() else { panic!("applied") };
        assert_eq!(restart_only, ["AGENT_FILES"], "taken at the next start");
        assert!(live.current().config.files.is_empty(), "the sources as they run");
        let text = openmetrics(&registry);
        for series in [
            r#"watcher_agent_config_reloads_total{result="applied"} 2"#,
            r#"watcher_agent_config_reloads_total{result="refused"} 2"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        assert!(!text.contains(&format!("hash=\"{hash}\"")), "only the configuration that runs");
        assert!(text.contains(&format!("watcher_agent_config_info{{hash=\"{}\"}} 1", reloader.running())), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
