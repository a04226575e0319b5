//! Variables the agent does not know: the closest known name, said with the error; and the
//! kubelet's Service variables, which are not the agent's and are let be.

use std::net::SocketAddr;

use super::{PREFIX, RULE_FAMILIES, VARIABLES};

/// ` (did you mean AGENT_X?)` for the known variable closest to `key`, or nothing.
pub(super) fn closest(key: &str) -> String {
    let fixed: Vec<&str> = VARIABLES.iter().filter(|v| v.is_fixed()).map(|v| v.name).collect();
    let mut candidates: Vec<String> = fixed.iter().map(|n| (*n).to_owned()).collect();
    // `AGENT_RULES_ERROR`: the prefix misspelt, the rule's name kept.
    if let Some(rest) = key.strip_prefix(PREFIX)
        && let Some((head, name)) = rest.split_once('_')
    {
        for prefix in RULE_FAMILIES {
            if distance(&format!("{PREFIX}{head}_"), prefix) <= 2 {
                candidates.push(format!("{prefix}{name}"));
            }
        }
    }
    // `AGENT_POLL_INTERVAL`: a known name with more after it.
    let extended = candidates.iter().filter(|c| key.starts_with(&format!("{c}_"))).max_by_key(|c| c.len());
    if let Some(name) = extended {
        return format!(" (did you mean {name}?)");
    }
    let best = candidates.iter().map(|c| (distance(key, c), c)).min();
    match best {
        Some((d, name)) if d <= 4 => format!(" (did you mean {name}?)"),
        _ => format!(" (known: {}, {})", fixed.join(", "), RULE_FAMILIES.map(|p| format!("{p}<NAME>")).join(", ")),
    }
}

/// Levenshtein distance, for names of a few dozen characters.
fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            current[j + 1] = (previous[j] + usize::from(x != y)).min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

/// Whether `key=value` is one of the kubelet's Service variables (`<SVC>_SERVICE_HOST`,
/// `<SVC>_SERVICE_PORT[_<NAME>]`, `<SVC>_PORT`, `<SVC>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]`),
/// which a Service named `agent-...` puts in every container of its namespace. The value must
/// look like one too (an address, a port, `tcp://...`), so a rule named `..._PORT` stays a rule.
pub(super) fn is_service_link(key: &str, value: &str) -> bool {
    let address = |v: &str| v.parse::<std::net::IpAddr>().is_ok();
    let port = |v: &str| v.parse::<u16>().is_ok();
    let url = |v: &str| {
        ["tcp://", "udp://", "sctp://"]
            .iter()
            .any(|p| v.strip_prefix(p).is_some_and(|rest| rest.parse::<SocketAddr>().is_ok()))
    };
    if key.ends_with("_SERVICE_HOST") {
        return address(value);
    }
    if key.contains("_SERVICE_PORT") {
        return port(value);
    }
    if key.ends_with("_PORT") && !key.contains("_PORT_") {
        return url(value);
    }
    // <SVC>_PORT_<n>_<PROTO>[_SUFFIX]
    let Some(at) = key.rfind("_PORT_") else { return false };
    let parts: Vec<&str> = key[at + "_PORT_".len()..].split('_').collect();
    let numbered =
        parts.first().is_some_and(|n| port(n)) && parts.get(1).is_some_and(|p| ["TCP", "UDP", "SCTP"].contains(p));
    numbered
        && match parts.get(2) {
            None => url(value),
            Some(&"PROTO") => ["tcp", "udp", "sctp"].contains(&value),
            Some(&"PORT") => port(value),
            Some(&"ADDR") => address(value),
            Some(_) => false,
        }
}
