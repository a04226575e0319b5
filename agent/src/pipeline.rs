//! The one path every source's text takes. A source (the files, the log stream: [`crate::tail`])
//! hands the pipeline [`Record`]s — which source, its bytes (a run of lines, a line or an event
//! of joined lines), when they were written — and [`Report`]s of what became of it; the
//! pipeline reads each record as its source's format says ([`crate::parse`]), matches it
//! against every rule ([`crate::matching`]) and counts it into the metrics and the alerts'
//! windows. A feature of counting is added here, once, for every source.

mod counting;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::Config;
use crate::matching::Rules;
use crate::metrics::Metrics;
use crate::parse::fields::Format;
pub use crate::record::{Record, Report, Sink, SourceError};
pub use crate::sinks::alerts::SharedAlerts;

/// One reader's pipeline (the files' thread has one, the log stream's task another): counts
/// are kept locally and added to the (atomic) metrics at [`Pipeline::flush`], so no reader
/// waits for another, nor a scrape for a reader. Over a [`Live`] configuration, it takes a new
/// one at a flush: every batch is counted whole by one configuration.
pub struct Pipeline {
    counting: counting::Counting,
    metrics: Arc<Metrics>,
    /// The configuration that runs, and the generation of it this pipeline counts with.
    live: Option<(Arc<Live>, u64)>,
}

/// A configuration, compiled: what the pipelines count with.
pub struct Compiled {
    /// The configuration.
    pub config: Config,
    /// Its rules, compiled together.
    pub rules: Rules,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
}

/// The configuration that runs, shared by every reader's pipeline and the alert loop. A reload
/// puts a new one in whole ([`Live::swap`]); each pipeline takes it at its next flush, between
/// two batches, so no line is lost or counted twice across a swap.
pub struct Live {
    current: std::sync::Mutex<Arc<Compiled>>,
    generation: AtomicU64,
    alerts: SharedAlerts,
}

impl Live {
    /// `compiled` running, its alerts in `alerts`.
    pub fn new(compiled: Compiled, alerts: SharedAlerts) -> Arc<Self> {
        Arc::new(Self { current: std::sync::Mutex::new(Arc::new(compiled)), generation: AtomicU64::new(0), alerts })
    }

    /// The configuration that runs.
    pub fn current(&self) -> Arc<Compiled> {
        watcher_base::lock(&self.current).clone()
    }

    /// How many times it was swapped.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The alerts.
    pub fn alerts(&self) -> &SharedAlerts {
        &self.alerts
    }

    /// `compiled` runs from now on: the alerts take its rules (those unchanged keep their
    /// windows), and each pipeline takes it at its next flush.
    pub fn swap(&self, compiled: Compiled) {
        watcher_base::lock(&self.alerts).reconfigure(&compiled.config.rules);
        *watcher_base::lock(&self.current) = Arc::new(compiled);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl Pipeline {
    /// A pipeline over `config`'s sources (its files' globs, then the log stream if one is
    /// read) and `rules` (`config`'s, compiled), into `metrics` and `alerts`.
    pub fn new(config: &Config, rules: &Rules, metrics: Arc<Metrics>, alerts: SharedAlerts) -> Self {
        Self::reading(rules, formats(config), config.max_line_bytes, metrics, alerts)
    }

    /// A pipeline over the configuration that runs in `live`, taking each new one at a flush.
    pub fn live(live: &Arc<Live>) -> Self {
        let generation = live.generation();
        let compiled = live.current();
        let mut pipeline = Self::of(&compiled, live.alerts.clone());
        pipeline.live = Some((live.clone(), generation));
        pipeline
    }

    fn of(compiled: &Compiled, alerts: SharedAlerts) -> Self {
        Self::new(&compiled.config, &compiled.rules, compiled.metrics.clone(), alerts)
    }

    /// A pipeline over `rules` (compiled) for sources read as `formats` (one each), lines
    /// matched on their first `max_line` bytes, into `metrics` and `alerts`.
    pub fn reading(
        rules: &Rules,
        formats: Vec<Format>,
        max_line: usize,
        metrics: Arc<Metrics>,
        alerts: SharedAlerts,
    ) -> Self {
        let counting = counting::Counting::new(rules.clone(), metrics.clone(), alerts, formats, max_line);
        Self { counting, metrics, live: None }
    }

    /// Adds what was counted since the last flush to the metrics; then, over a [`Live`]
    /// configuration that was swapped since, counts with the new one.
    pub fn flush(&mut self) {
        self.counting.flush();
        let Some((live, seen)) = &self.live else { return };
        let generation = live.generation();
        if generation != *seen {
            let live = live.clone();
            *self = Self::of(&live.current(), live.alerts.clone());
            self.live = Some((live, generation));
        }
    }
}

/// How each source of `config` is read: its files' globs, then the log stream if one is read.
fn formats(config: &Config) -> Vec<Format> {
    let mut formats: Vec<Format> = vec![config.format; config.files.len()];
    if config.logs_container.is_some() {
        formats.push(config.stdout_format);
    }
    formats
}

impl Sink for Pipeline {
    fn take(&mut self, record: Record<'_>) {
        self.counting.take(record);
    }

    fn flush(&mut self) {
        Pipeline::flush(self);
    }

    fn report(&mut self, report: Report<'_>) {
        let metrics = &self.metrics;
        match report {
            Report::Error { source, reason, .. } => metrics.source_error(source, reason),
            Report::Closed(reason) => metrics.closed(reason),
            Report::Skipped(reason) => metrics.skipped(reason),
            Report::Truncated { source, copy_found } => metrics.truncated(source, copy_found),
            Report::OpenFiles(count) => {
                metrics.open_files.set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            Report::Reconnected(reason) => metrics.reconnected(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    use crate::metrics::Registry;

    use std::time::SystemTime;

    use super::*;
    use crate::metrics::openmetrics;
    use crate::record::Piece;
    use crate::sinks::alerts::AlertBook;

    fn compiled(vars: &[(&str, &str)], metrics: Option<&Metrics>) -> (Compiled, Option<Registry>) {
        let (config, rules) = crate::compile(vars.iter().copied()).expect("a configuration");
        match metrics {
            Some(before) => (Compiled { metrics: Arc::new(before.reconfigured(&config.rules)), config, rules }, None),
            None => {
                let mut registry = Registry::default();
                let metrics = Arc::new(Metrics::register(&mut registry, &["/logs/*.log".into()], &config.rules, 100));
                (Compiled { config, rules, metrics }, Some(registry))
            }
        }
    }

    fn series(text: &str, name: &str) -> f64 {
        let line = text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '));
        line.and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(-1.0)
    }

    /// A reader counts a million lines in batches while another thread swaps in a new
    /// configuration as fast as it can (the rule `error` written two ways, made alike, so its
    /// series go on; a second rule `panic` there one time in two): every line and every match is
    /// counted once, whatever configuration each batch met.
    #[test]
    fn a_swap_between_batches_loses_and_counts_twice_nothing() {
        let one = [("AGENT_FILES", "/logs/*.log"), ("AGENT_RULE_ERROR", r"\bERROR\b")];
        let two = [("AGENT_FILES", "/logs/*.log"), ("AGENT_RULE_ERROR", "ERROR"), ("AGENT_RULE_PANIC", "panic")];
        let (first, registry) = compiled(&one, None);
        let registry = registry.expect("registered");
        let alerts = Arc::new(Mutex::new(AlertBook::new(&first.config.rules)));
        let live = Live::new(first, alerts);
        let done = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (live, done) = (live.clone(), done.clone());
            std::thread::spawn(move || {
                let mut swaps = 0_u64;
                while !done.load(Ordering::Acquire) {
                    let vars: &[(&str, &str)] = if swaps.is_multiple_of(2) { &two } else { &one };
                    let (next, _) = compiled(vars, Some(&live.current().metrics));
                    live.swap(next);
                    swaps += 1;
                }
                swaps
            })
        };
        let batch: String = (0..1000).map(|i| if i % 10 == 0 { "an ERROR here\n" } else { "fine\n" }).collect();
        let mut pipeline = Pipeline::live(&live);
        let written = SystemTime::now();
        for _ in 0..1000 {
            pipeline.take(Record { source: 0, piece: Piece::Run(batch.as_bytes()), written });
            pipeline.flush();
        }
        done.store(true, Ordering::Release);
        let swaps = swapper.join().expect("the swapper");
        pipeline.flush();
        let text = openmetrics(&registry);
        assert_eq!(series(&text, r#"watcher_agent_lines_total{source="/logs/*.log"}"#), 1_000_000.0);
        assert_eq!(series(&text, r#"watcher_agent_matches_total{rule="error",source="/logs/*.log"}"#), 100_000.0);
        assert!(swaps > 10, "swapped {swaps} times");
        assert!(live.generation() == swaps);
    }
}
