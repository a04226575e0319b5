//! Alert thresholds, by the time lines were written: a rule fires when `count` of its matches,
//! each at its own time (the log stream's timestamp; for a file, when it was last written),
//! fall within the `window` that ends now, and is resolved once fewer than `count` do. A backlog
//! read late (a file an hour old, lines sent again after a restart) is counted and never fires.
//! Time is passed in, so tests control the clock.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::config::{RuleConfig, Threshold};

/// The alerts, shared by the readers' pipelines and the alert loop.
pub type SharedAlerts = Arc<Mutex<AlertBook>>;

/// Bytes of the last matching line an alert quotes.
const QUOTED_LINE: usize = 256;

/// A change of an alert's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// `count` matches within the window: firing.
    Fired,
    /// Fewer than `count` matches within the window again.
    Resolved,
}

/// The recent matches of one rule.
#[derive(Debug)]
pub struct Window {
    threshold: Threshold,
    /// The times of the latest `count` matches, oldest first: all that the threshold needs.
    recent: VecDeque<SystemTime>,
    firing: bool,
}

impl Window {
    /// An empty window for `threshold`.
    pub fn new(threshold: Threshold) -> Self {
        let keep = usize::try_from(threshold.count).unwrap_or(usize::MAX).min(100_000);
        Self { threshold, recent: VecDeque::with_capacity(keep.min(1024)), firing: false }
    }

    /// The threshold.
    pub fn threshold(&self) -> Threshold {
        self.threshold
    }

    /// Whether it fires now.
    pub fn firing(&self) -> bool {
        self.firing
    }

    /// A match written at `at`, seen at `now`: `Fired` when it makes the count. Matches may
    /// come out of order (stdout and stderr are stamped apart); one stamped after `now` counts
    /// as now.
    pub fn record(&mut self, at: SystemTime, now: SystemTime) -> Option<Transition> {
        let at = at.min(now);
        let count = self.threshold.count as usize;
        if self.recent.len() == count && self.recent.front().is_some_and(|oldest| at <= *oldest) {
            return self.check(now); // older than every match kept: the latest `count` stay
        }
        let index = self.recent.partition_point(|t| *t <= at);
        self.recent.insert(index, at);
        if self.recent.len() > count {
            self.recent.pop_front();
        }
        self.check(now)
    }

    fn check(&mut self, now: SystemTime) -> Option<Transition> {
        if !self.firing && self.full(now) {
            self.firing = true;
            return Some(Transition::Fired);
        }
        None
    }

    /// Time passing: `Resolved` once the window no longer holds `count` matches.
    pub fn tick(&mut self, now: SystemTime) -> Option<Transition> {
        if self.firing && !self.full(now) {
            self.firing = false;
            return Some(Transition::Resolved);
        }
        None
    }

    /// When the matches that made it fire began: the oldest of the latest `count`.
    pub fn first(&self) -> Option<SystemTime> {
        self.recent.front().copied()
    }

    /// Matches within the window ending at `now` (at most `count`).
    pub fn count(&self, now: SystemTime) -> usize {
        self.recent.iter().filter(|t| within(**t, now, self.threshold.window)).count()
    }

    fn full(&self, now: SystemTime) -> bool {
        self.recent.len() == self.threshold.count as usize
            && self.recent.front().is_some_and(|oldest| within(*oldest, now, self.threshold.window))
    }
}

fn within(at: SystemTime, now: SystemTime, window: Duration) -> bool {
    now.duration_since(at).unwrap_or_default() <= window
}

/// What a rule's alert did since the last look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The rule's index.
    pub rule: usize,
    /// The rule's name.
    pub name: String,
    /// The Event's reason: `LogRule` and the rule's name in camel case.
    pub reason: String,
    /// Firing now.
    pub firing: bool,
    /// It fired since the last look (a new firing).
    pub fired: bool,
    /// It was resolved since the last look.
    pub resolved: bool,
    /// Matches while it fired since the last look (the crossing included).
    pub occurrences: u32,
    /// What fired, with the last matching line: always the rule and a line.
    pub note: String,
    /// When the matches of this firing began.
    pub starts_at: SystemTime,
}

struct Alerted {
    name: String,
    reason: String,
    window: Window,
    occurrences: u32,
    fired: bool,
    resolved: bool,
    note: String,
    starts_at: SystemTime,
}

impl Alerted {
    /// A match in `line`, written at `at`, seen at `now`.
    fn record(&mut self, line: &[u8], at: SystemTime, now: SystemTime) {
        let fired = self.window.record(at, now) == Some(Transition::Fired);
        if fired {
            self.fired = true;
            self.starts_at = self.window.first().unwrap_or(at);
        }
        if fired || self.window.firing() {
            self.occurrences = self.occurrences.saturating_add(1);
            let threshold = self.window.threshold();
            let quoted = crate::text::truncate(&String::from_utf8_lossy(line), QUOTED_LINE);
            self.note =
                format!("rule {} matched {} times within {threshold}; last line: {quoted}", self.name, threshold.count);
        }
    }
}

/// Where a rule's alert stands: what the alert loop hands the sinks (Events, Alertmanager) each
/// tick. Counts only grow, so a sink that missed a tick (busy, its server slow) sees all it
/// missed at the next: nothing is queued, nothing dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertState {
    /// The rule's name.
    pub name: String,
    /// The Event's reason.
    pub reason: String,
    /// Firing now.
    pub firing: bool,
    /// Times it fired (a new firing after a resolution is the next).
    pub firings: u64,
    /// Matches while it fired, every firing together.
    pub occurrences: u64,
    /// What fired last, with the last matching line (empty before the first firing).
    pub note: String,
    /// When the matches of the latest firing began.
    pub starts_at: SystemTime,
    /// When the latest firing was resolved (`None` while it fires, or before it ever fired).
    pub resolved_at: Option<SystemTime>,
}

impl AlertState {
    /// A rule's alert that never fired.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            reason: reason(name),
            firing: false,
            firings: 0,
            occurrences: 0,
            note: String::new(),
            starts_at: SystemTime::UNIX_EPOCH,
            resolved_at: None,
        }
    }

    /// Takes in what `report` says happened since the last look, resolved at `now`.
    pub fn update(&mut self, report: &Report, now: SystemTime) {
        if report.fired {
            self.firings += 1;
            self.resolved_at = None;
        }
        self.firing = report.firing;
        self.occurrences += u64::from(report.occurrences);
        self.note.clone_from(&report.note);
        self.starts_at = report.starts_at;
        if report.resolved {
            self.resolved_at = Some(now);
        }
    }
}

/// Where alerts are sent: Events, Alertmanager.
pub trait AlertSink: Send {
    /// What it sends, for the log.
    const WHAT: &'static str;
    /// Sends what `alerts` make due at `now` (`wall` on the clock), counted in `metrics`;
    /// everything left when `closing`.
    fn sync(
        &mut self,
        alerts: &[AlertState],
        now: std::time::Instant,
        wall: SystemTime,
        closing: bool,
        metrics: &crate::metrics::Metrics,
    ) -> impl Future<Output = ()> + Send;
}

/// A sink's task: `sink` synced with where the alerts stand at each change and every second (for
/// what falls due with time), until the alert loop is gone; then once more, closing, for at most
/// `deadline`. Events and Alertmanager each run one.
pub async fn sink_task<S: AlertSink>(
    mut sink: S,
    mut alerts: tokio::sync::watch::Receiver<Vec<AlertState>>,
    metrics: Arc<crate::metrics::Metrics>,
    deadline: Duration,
) {
    let now = || (std::time::Instant::now(), SystemTime::now());
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            changed = alerts.changed() => if changed.is_err() { break },
            _ = ticks.tick() => {}
        }
        let snapshot = alerts.borrow_and_update().clone();
        let (at, wall) = now();
        sink.sync(&snapshot, at, wall, false, &metrics).await;
    }
    let snapshot = alerts.borrow().clone();
    let (at, wall) = now();
    if tokio::time::timeout(deadline, sink.sync(&snapshot, at, wall, true, &metrics)).await.is_err() {
        tracing::warn!(what = S::WHAT, "stopping: what was left to send could not be sent in time");
    }
}

/// Every rule's alert: the windows, and what happened since the last look. Shared by the
/// readers (a match of a rule with an alert is recorded here) and the alert loop (which looks).
pub struct AlertBook {
    alerts: Vec<Option<Alerted>>,
    /// Which configuration its rules are (one more at each [`AlertBook::reconfigure`]): a
    /// reader still counting with the one before names its rule by name.
    generation: u64,
}

impl AlertBook {
    /// The alerts of `rules` (none for a rule without `AGENT_ALERT_<NAME>`).
    pub fn new(rules: &[RuleConfig]) -> Self {
        Self { alerts: Self::alerts(rules, &mut Vec::new()), generation: 0 }
    }

    /// The alerts of a new configuration's `rules`: a rule's alert with the same name and
    /// threshold as before keeps its window (its matches, whether it fires); the others start
    /// afresh, and a removed rule's alert goes.
    pub fn reconfigure(&mut self, rules: &[RuleConfig]) {
        self.alerts = Self::alerts(rules, &mut self.alerts);
        self.generation += 1;
    }

    /// Which configuration its rules are.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The alerts of `rules`, each taken from `before` where it has the same name and threshold.
    fn alerts(rules: &[RuleConfig], before: &mut [Option<Alerted>]) -> Vec<Option<Alerted>> {
        let mut kept = |name: &str, threshold: Threshold| {
            let same =
                |a: &Option<Alerted>| a.as_ref().is_some_and(|a| a.name == name && a.window.threshold == threshold);
            before.iter_mut().find(|a| same(a)).and_then(Option::take)
        };
        rules
            .iter()
            .map(|r| {
                let threshold = r.alert?;
                kept(&r.name, threshold).or_else(|| {
                    Some(Alerted {
                        name: r.name.clone(),
                        reason: reason(&r.name),
                        window: Window::new(threshold),
                        occurrences: 0,
                        fired: false,
                        resolved: false,
                        note: String::new(),
                        starts_at: SystemTime::UNIX_EPOCH,
                    })
                })
            })
            .collect()
    }

    /// Whether rule `rule` has an alert.
    pub fn has_alert(&self, rule: usize) -> bool {
        self.alerts.get(rule).is_some_and(Option::is_some)
    }

    /// A match of rule `rule` in `line`, written at `at`, seen at `now`.
    pub fn record(&mut self, rule: usize, line: &[u8], at: SystemTime, now: SystemTime) {
        let Some(Some(alert)) = self.alerts.get_mut(rule) else { return };
        alert.record(line, at, now);
    }

    /// A match of rule `rule` (named `name`) of configuration `generation`: as
    /// [`AlertBook::record`], the rule found by name where the book has been reconfigured since.
    pub fn record_of(
        &mut self,
        generation: u64,
        (rule, name): (usize, &str),
        line: &[u8],
        at: SystemTime,
        now: SystemTime,
    ) {
        if generation == self.generation {
            return self.record(rule, line, at, now);
        }
        let alert = self.alerts.iter_mut().flatten().find(|a| a.name == name);
        if let Some(alert) = alert {
            alert.record(line, at, now);
        }
    }

    /// Time passing to `now`: what each alert did since the last look (only alerts that fire or
    /// changed).
    pub fn look(&mut self, now: SystemTime) -> Vec<Report> {
        let mut reports = Vec::new();
        for (rule, alert) in self.alerts.iter_mut().enumerate() {
            let Some(alert) = alert else { continue };
            if alert.window.tick(now) == Some(Transition::Resolved) {
                alert.resolved = true;
            }
            if !alert.window.firing() && !alert.fired && !alert.resolved {
                continue;
            }
            reports.push(Report {
                rule,
                name: alert.name.clone(),
                reason: alert.reason.clone(),
                firing: alert.window.firing(),
                fired: std::mem::take(&mut alert.fired),
                resolved: std::mem::take(&mut alert.resolved),
                occurrences: std::mem::take(&mut alert.occurrences),
                note: alert.note.clone(),
                starts_at: alert.starts_at,
            });
        }
        reports
    }

    /// Whether each rule's alert fires now.
    pub fn firing(&self) -> Vec<bool> {
        self.alerts.iter().map(|a| a.as_ref().is_some_and(|a| a.window.firing())).collect()
    }
}

/// `LogRuleError` for rule `error`, `LogRuleSlowQuery` for `slow_query`.
pub fn reason(rule: &str) -> String {
    let mut reason = String::from("LogRule");
    for part in rule.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            reason.push(first.to_ascii_uppercase());
            reason.extend(chars);
        }
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(count: u32, seconds: u64) -> Window {
        Window::new(Threshold { count, window: Duration::from_secs(seconds) })
    }

    fn at(start: SystemTime, seconds: u64) -> SystemTime {
        start + Duration::from_secs(seconds)
    }

    #[test]
    fn fires_when_the_count_falls_within_the_window_and_resolves_after() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut w = window(3, 60);
        assert_eq!(w.record(at(start, 0), at(start, 0)), None);
        assert_eq!(w.record(at(start, 30), at(start, 30)), None);
        assert_eq!(w.record(at(start, 59), at(start, 59)), Some(Transition::Fired));
        assert_eq!(w.first(), Some(at(start, 0)), "the firing began with the first of the three");
        assert_eq!(w.record(at(start, 61), at(start, 61)), None, "already firing: one transition");
        assert!(w.firing());
        assert_eq!(w.tick(at(start, 80)), None, "30, 59, 61 are within a minute of 80");
        assert_eq!(w.tick(at(start, 91)), Some(Transition::Resolved), "30 is out: two left");
        assert_eq!(w.tick(at(start, 200)), None);
        assert_eq!(w.count(at(start, 200)), 0);
    }

    /// An hour-old backlog, read now: counted elsewhere, never firing; lines out of order (stdout
    /// and stderr stamped apart) fire by their own times.
    #[test]
    fn lines_count_by_their_own_time() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let now = at(start, 3600);
        let mut w = window(3, 60);
        for s in 0..5 {
            assert_eq!(w.record(at(start, s), now), None, "an hour old");
        }
        assert!(!w.firing());
        let mut w = window(3, 60);
        assert_eq!(w.record(at(start, 3590), now), None);
        assert_eq!(w.record(at(start, 3570), now), None, "earlier than the last: kept in order");
        assert_eq!(w.record(at(start, 3580), now), Some(Transition::Fired));
        assert_eq!(w.first(), Some(at(start, 3570)));
    }

    #[test]
    fn matches_spread_wider_than_the_window_never_fire() {
        let start = SystemTime::UNIX_EPOCH;
        let mut w = window(2, 10);
        for i in 0..100 {
            assert_eq!(w.record(at(start, 11 * i), at(start, 11 * i)), None);
        }
    }

    #[test]
    fn memory_is_the_count_not_the_matches() {
        let start = SystemTime::UNIX_EPOCH;
        let mut w = window(5, 60);
        for i in 0..10_000 {
            let t = start + Duration::from_millis(i);
            w.record(t, t);
        }
        assert_eq!(w.recent.len(), 5);
    }

    #[test]
    fn the_book_says_firing_occurrences_and_resolution_with_a_note() {
        let rules = [RuleConfig {
            alert: Some(Threshold { count: 2, window: Duration::from_secs(60) }),
            ..RuleConfig::counting("error", "ERROR").expect("a rule")
        }];
        let mut book = AlertBook::new(&rules);
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        book.record(0, b"ERROR one", at(start, 0), at(start, 0));
        assert!(book.look(at(start, 1)).is_empty(), "below the threshold: nothing to say");
        book.record(0, b"ERROR two", at(start, 1), at(start, 1));
        book.record(0, b"ERROR three", at(start, 2), at(start, 2));
        let reports = book.look(at(start, 3));
        assert_eq!(reports.len(), 1);
        let report = &reports[0];
        assert!(report.fired && report.firing && !report.resolved);
        assert_eq!((report.occurrences, report.reason.as_str()), (2, "LogRuleError"));
        assert_eq!(report.note, "rule error matched 2 times within 2 in 1m; last line: ERROR three");
        assert_eq!(report.starts_at, at(start, 0));
        let quiet = book.look(at(start, 30));
        assert_eq!((quiet[0].fired, quiet[0].occurrences, quiet[0].firing), (false, 0, true), "still firing");
        let resolved = book.look(at(start, 62));
        assert!(resolved[0].resolved && !resolved[0].firing);
        assert_eq!(resolved[0].note, report.note, "the note stays");
        assert!(book.look(at(start, 63)).is_empty());
    }

    #[test]
    fn reasons_are_camel_case() {
        assert_eq!(reason("error"), "LogRuleError");
        assert_eq!(reason("slow_query"), "LogRuleSlowQuery");
        assert_eq!(reason("error_"), "LogRuleError");
    }
}
