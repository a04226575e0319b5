//! Alert thresholds: a rule fires when `count` of its matches fall within `window`, and is
//! resolved once fewer than `count` do. Time is passed in, so tests control the clock.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::Threshold;

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
    /// The times of the last `count` matches, oldest first: all that the threshold needs.
    recent: VecDeque<Instant>,
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

    /// A match at `now`: `Fired` when it makes the count.
    pub fn record(&mut self, now: Instant) -> Option<Transition> {
        if self.recent.len() == self.threshold.count as usize {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        if !self.firing && self.full(now) {
            self.firing = true;
            return Some(Transition::Fired);
        }
        None
    }

    /// Time passing: `Resolved` once the window no longer holds `count` matches.
    pub fn tick(&mut self, now: Instant) -> Option<Transition> {
        if self.firing && !self.full(now) {
            self.firing = false;
            return Some(Transition::Resolved);
        }
        None
    }

    /// Matches within the window ending at `now` (at most `count`).
    pub fn count(&self, now: Instant) -> usize {
        self.recent.iter().filter(|t| now.saturating_duration_since(**t) <= self.threshold.window).count()
    }

    fn full(&self, now: Instant) -> bool {
        self.recent.len() == self.threshold.count as usize
            && self.recent.front().is_some_and(|oldest| now.saturating_duration_since(*oldest) <= self.threshold.window)
    }
}

/// How long after `now` the window of a firing alert may resolve: when to tick again.
pub fn next_tick(windows: &[Option<Window>]) -> Duration {
    windows
        .iter()
        .flatten()
        .filter(|w| w.firing())
        .map(|w| (w.threshold().window / 10).max(Duration::from_millis(100)))
        .min()
        .unwrap_or(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(count: u32, seconds: u64) -> Window {
        Window::new(Threshold { count, window: Duration::from_secs(seconds) })
    }

    #[test]
    fn fires_when_the_count_falls_within_the_window_and_resolves_after() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut w = window(3, 60);
        assert_eq!(w.record(at(0)), None);
        assert_eq!(w.record(at(30)), None);
        assert_eq!(w.record(at(59)), Some(Transition::Fired));
        assert_eq!(w.record(at(61)), None, "already firing: one transition");
        assert!(w.firing());
        assert_eq!(w.tick(at(80)), None, "30, 59, 61 are within a minute of 80");
        assert_eq!(w.tick(at(91)), Some(Transition::Resolved), "30 is out: two left");
        assert_eq!(w.tick(at(200)), None);
        assert_eq!(w.count(at(200)), 0);
    }

    #[test]
    fn matches_spread_wider_than_the_window_never_fire() {
        let start = Instant::now();
        let mut w = window(2, 10);
        for i in 0..100 {
            assert_eq!(w.record(start + Duration::from_secs(11 * i)), None);
        }
    }

    #[test]
    fn a_threshold_of_one_fires_at_the_first_match() {
        let start = Instant::now();
        let mut w = window(1, 60);
        assert_eq!(w.record(start), Some(Transition::Fired));
        assert_eq!(w.tick(start + Duration::from_secs(61)), Some(Transition::Resolved));
        assert_eq!(w.record(start + Duration::from_secs(62)), Some(Transition::Fired), "fires again");
    }

    #[test]
    fn memory_is_the_count_not_the_matches() {
        let start = Instant::now();
        let mut w = window(5, 60);
        for i in 0..10_000 {
            w.record(start + Duration::from_millis(i));
        }
        assert_eq!(w.recent.len(), 5);
    }
}
