//! The registry in each format `/metrics` serves: Prometheus' protobuf, OpenMetrics text,
//! Prometheus text 0.0.4.

use prometheus_client::encoding::prometheus_protobuf::{encode, prometheus_data_model::MetricFamily};
use prometheus_client::registry::Registry;
use prost::Message;

use super::Exemplars;

/// The metric families of `registry`, with `exemplars`: what the protobuf exposition and remote
/// write carry.
pub fn families(registry: &Registry, exemplars: &Exemplars) -> Vec<MetricFamily> {
    // Every metric here encodes (as the text encoders show): an error leaves the families before it.
    let mut families = encode(registry).unwrap_or_default();
    exemplars.fill(&mut families);
    families
}

/// `registry` in Prometheus' protobuf exposition: length-delimited `io.prometheus.client.MetricFamily`
/// messages, native histograms with their classic buckets, with `exemplars`.
pub fn protobuf(registry: &Registry, exemplars: &Exemplars) -> Vec<u8> {
    let families = families(registry, exemplars);
    let mut out = Vec::with_capacity(families.iter().map(|f| f.encoded_len() + 4).sum());
    for family in families {
        // Into a Vec: it grows, so it cannot run short.
        let _ = family.encode_length_delimited(&mut out);
    }
    out
}

/// `registry` as OpenMetrics text.
pub fn openmetrics(registry: &Registry) -> String {
    let mut body = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut body, registry);
    body
}

/// `registry` in Prometheus' text format 0.0.4: a counter's `# TYPE` and `# HELP` name its
/// `_total` sample, and there is no `# EOF` or `# UNIT`.
pub fn prometheus_text(registry: &Registry) -> String {
    let open = openmetrics(registry);
    let counters: Vec<String> =
        open.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter").map(str::to_owned)).collect();
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# TYPE ", "# HELP "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.iter().any(|c| c == name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}
