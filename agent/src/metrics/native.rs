//! Prometheus native histograms (`AGENT_NATIVE_<NAME>`): exponential buckets chosen by a growth
//! factor, as client_golang chooses them (`NativeHistogramBucketFactor`), kept sparse. Bucket
//! `i` of schema `s` holds the values in `(base^(i-1), base^i]`, `base = 2^(2^-s)`; the values
//! within the zero threshold are counted apart, negative values in buckets of their own.

/// The zero bucket's half-width: client_golang's `DefNativeHistogramZeroThreshold` (2^-128).
pub const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

/// The lower bounds of the buckets within one power of two, for `schema` > 0, as fractions in
/// `[0.5, 1)`: `2^(i/2^schema) / 2`.
fn bounds(schema: i32) -> Vec<f64> {
    let within = 1_i32 << schema;
    (0..within).map(|i| 2_f64.powf(f64::from(i) / f64::from(within)) / 2.0).collect()
}

/// `value` (finite, > 0) as `frac × 2^exp`, `frac` in `[0.5, 1)`: C's `frexp`.
fn frexp(value: f64) -> (f64, i32) {
    let bits = value.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: scaled into the normal range first.
        let (frac, exp) = frexp(value * 2_f64.powi(64));
        return (frac, exp - 64);
    }
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, exp - 1022)
}

/// Which bucket of a schema a value falls in: made once a rule, asked per value.
#[derive(Clone, Debug)]
pub struct Index {
    schema: i32,
    bounds: Vec<f64>,
}

impl Index {
    /// The buckets of `schema` (0 to 8).
    pub fn new(schema: i32) -> Self {
        Self { schema, bounds: if schema > 0 { bounds(schema) } else { Vec::new() } }
    }

    /// The schema.
    pub fn schema(&self) -> i32 {
        self.schema
    }

    /// The bucket of `magnitude` (finite, > 0), as client_golang's `observe` finds it.
    #[inline]
    pub fn of(&self, magnitude: f64) -> i32 {
        if magnitude.is_infinite() {
            return i32::MAX;
        }
        let (frac, exp) = frexp(magnitude);
        if self.schema > 0 {
            let within = self.bounds.partition_point(|bound| *bound < frac) as i32;
            within + (exp - 1) * self.bounds.len() as i32
        } else {
            let key = if frac == 0.5 { exp - 1 } else { exp };
            let offset = (1 << -self.schema) - 1;
            (key + offset) >> -self.schema
        }
    }
}

/// Counts by bucket index, dense between the lowest and the highest seen (values of one rule
/// span a few powers of two: a few dozen buckets).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// The index of `counts[0]`.
    first: i32,
    counts: Vec<u64>,
}

/// At most this many buckets between the lowest and the highest: beyond, the far ones are
/// merged into the nearest end (client_golang's default limit is 160 buckets a side).
const MAX_SPAN: usize = 4096;

impl Counts {
    /// `count` more in bucket `index`.
    #[inline]
    pub fn add(&mut self, index: i32, count: u64) {
        if self.counts.is_empty() {
            self.first = index;
            self.counts.push(count);
            return;
        }
        if index < self.first {
            let grow = (self.first - index) as usize;
            if grow + self.counts.len() > MAX_SPAN {
                self.counts[0] += count;
                return;
            }
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.first = index;
        }
        let at = (index - self.first) as usize;
        if at >= self.counts.len() {
            if at >= MAX_SPAN {
                let last = self.counts.len() - 1;
                self.counts[last] += count;
                return;
            }
            self.counts.resize(at + 1, 0);
        }
        self.counts[at] += count;
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Counts) {
        for (offset, count) in other.counts.iter().enumerate() {
            if *count > 0 {
                self.add(other.first + offset as i32, *count);
            }
        }
    }

    /// Whether no value was counted.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|c| *c == 0)
    }

    /// The spans (offset from the end of the span before, or from 0; length) and the deltas
    /// (each bucket's count less the one before's) of the buckets that hold values, as the
    /// protobuf exposition and remote write carry them.
    pub fn spans_and_deltas(&self) -> (Vec<(i32, u32)>, Vec<i64>) {
        let mut spans: Vec<(i32, u32)> = Vec::new();
        let mut deltas = Vec::new();
        let mut previous_count = 0_i64;
        let mut next_index = 0_i32;
        let mut in_span = false;
        for (offset, count) in self.counts.iter().enumerate() {
            let index = self.first + offset as i32;
            if *count == 0 {
                in_span = false;
                continue;
            }
            match spans.last_mut() {
                Some(span) if in_span => span.1 += 1,
                _ => spans.push((index - next_index, 1)),
            }
            in_span = true;
            next_index = index + 1;
            let count = i64::try_from(*count).unwrap_or(i64::MAX);
            deltas.push(count - previous_count);
            previous_count = count;
        }
        (spans, deltas)
    }
}

/// A native histogram's observations: by bucket, positive and negative, and the zero bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Native {
    pub positive: Counts,
    pub negative: Counts,
    pub zero: u64,
}

impl Native {
    /// `value`, into the buckets `index` finds.
    #[inline]
    pub fn observe(&mut self, value: f64, index: &Index) {
        if value > ZERO_THRESHOLD {
            self.positive.add(index.of(value), 1);
        } else if value < -ZERO_THRESHOLD {
            self.negative.add(index.of(-value), 1);
        } else {
            self.zero += 1;
        }
    }

    /// Adds every observation of `other`.
    pub fn merge(&mut self, other: &Native) {
        self.positive.merge(&other.positive);
        self.negative.merge(&other.negative);
        self.zero += other.zero;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::{growth, native_schema_for};

    /// client_golang's choice: the coarsest schema whose growth is at most the factor.
    #[test]
    fn the_schema_is_the_coarsest_within_the_factor() {
        assert_eq!(native_schema_for(2.0), 0);
        assert_eq!(native_schema_for(1.5), 1);
        assert_eq!(native_schema_for(1.1), 3);
        assert_eq!(native_schema_for(1.01), 7);
        assert_eq!(native_schema_for(1.000_01), 8);
        for factor in [1.001, 1.01, 1.05, 1.1, 1.2, 1.5, 1.9, 2.0] {
            let schema = native_schema_for(factor);
            assert!(growth(schema) <= factor + 1e-12 || schema == 8, "{factor}: {schema}: the finest is 8");
            assert!(schema == 8 || growth(schema - 1) > factor, "{factor}: {schema}");
        }
    }

    /// Each value falls in `(base^(i-1), base^i]`, at every schema, the bounds themselves
    /// included in the bucket they close.
    #[test]
    fn a_value_falls_in_the_bucket_that_closes_above_it() {
        for schema in 0..=8 {
            let index = Index::new(schema);
            let base = growth(schema);
            for value in [1e-9, 0.001, 0.25, 0.5, 0.734, 1.0, 1.5, 2.0, 3.0, 1000.0, 1e12] {
                let i = index.of(value);
                let (low, high) = (base.powi(i - 1), base.powi(i));
                assert!(low < value * (1.0 + 1e-12) && value <= high * (1.0 + 1e-12), "{schema} {value}: {i}");
            }
            assert_eq!(index.of(1.0), 0, "1 closes bucket 0");
            assert_eq!(index.of(2.0), 1 << schema, "2 closes bucket 2^schema");
        }
        assert_eq!(frexp(8.0), (0.5, 4));
        assert_eq!(frexp(f64::MIN_POSITIVE / 4.0).1, -1023);
    }

    #[test]
    fn spans_skip_the_empty_buckets_and_deltas_follow_the_counts() {
        let mut counts = Counts::default();
        for (index, count) in [(3, 2), (4, 5), (7, 1), (-2, 4)] {
            counts.add(index, count);
        }
        assert_eq!(counts.spans_and_deltas(), (vec![(-2, 1), (4, 2), (2, 1)], vec![4, -2, 3, -4]));
        let mut merged = Counts::default();
        merged.merge(&counts);
        merged.merge(&counts);
        assert_eq!(merged.spans_and_deltas().1, vec![8, -4, 6, -8]);
    }
}
