//! A Kubernetes server's version as `GET /version` gives it (`major: "1"`, `minor: "29"`, or
//! with a vendor suffix `"29+"`), read in one place: what the operator, the webhook and
//! `check` decide from it.

/// A Kubernetes server's major and minor version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// `1`.
    pub major: u32,
    /// `29` (of `29` or `29+`).
    pub minor: u32,
}

impl ServerVersion {
    /// The version `major`.`minor` (as `/version` gives them: the minor perhaps with a vendor
    /// suffix such as `29+`); `None` when either is not a number.
    pub fn parse(major: &str, minor: &str) -> Option<Self> {
        let number = |s: &str| s.trim_end_matches(|c: char| !c.is_ascii_digit()).parse::<u32>().ok();
        Some(Self { major: number(major)?, minor: number(minor)? })
    }

    /// The version `info` gives.
    pub fn of(info: &k8s_openapi::apimachinery::pkg::version::Info) -> Option<Self> {
        Self::parse(&info.major, &info.minor)
    }

    /// Whether it is 1.`minor` or later.
    pub fn at_least(self, minor: u32) -> bool {
        (self.major, self.minor) >= (1, minor)
    }

    /// Its minor version, for a Kubernetes 1.x server.
    pub fn minor_of_1(self) -> Option<u32> {
        (self.major == 1).then_some(self.minor)
    }

    /// Whether it runs native sidecars (init containers with `restartPolicy: Always`, on by
    /// default since Kubernetes 1.29).
    pub fn native_sidecars(self) -> bool {
        self.at_least(29)
    }

    /// Whether it evaluates webhook `matchConditions` (beta and on by default from 1.28, GA in
    /// 1.30).
    pub fn match_conditions(self) -> bool {
        self.at_least(28)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_servers_give_them() {
        assert_eq!(ServerVersion::parse("1", "29+"), Some(ServerVersion { major: 1, minor: 29 }));
        assert_eq!(ServerVersion::parse("1", "x"), None);
        assert_eq!(ServerVersion::parse("", "29"), None);
        let v = |minor| ServerVersion { major: 1, minor };
        assert!(v(29).native_sidecars() && !v(28).native_sidecars());
        assert!(v(28).match_conditions() && !v(27).match_conditions());
        assert!(ServerVersion { major: 2, minor: 0 }.at_least(29));
        assert_eq!(ServerVersion { major: 2, minor: 0 }.minor_of_1(), None);
    }
}
