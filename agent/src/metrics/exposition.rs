//! The registry in each format `/metrics` serves: Prometheus' protobuf, OpenMetrics text,
//! Prometheus text 0.0.4.

use prometheus_client::registry::Registry;

/// `registry` in Prometheus' protobuf exposition: length-delimited `io.prometheus.client.MetricFamily`
/// messages, native histograms with their classic buckets.
pub fn protobuf(registry: &Registry) -> Vec<u8> {
    // Every metric here encodes (as the text encoders show): an error leaves the families before it.
    prometheus_client::encoding::prometheus_protobuf::encode_to_vec(registry).unwrap_or_default()
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
