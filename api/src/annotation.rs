//! The annotations the project writes on pods (and, for the images, on workloads): the bus
//! between the webhook, the controllers, the supervisor, the agent and the CLI. One type each,
//! with its key, the shape of its value, one `encode` and one `decode`: every crate writes and
//! reads them through these, and through nothing else.
//!
//! Reading is as lenient as the annotations have always been read: a list's empty entries are
//! dropped, an entry that does not have its list's shape is skipped. A timestamp that is not
//! RFC 3339 is an error, which the reader decides about.

use std::collections::BTreeMap;

/// The non-empty, trimmed entries of a comma-separated list.
fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|entry| !entry.is_empty())
}

/// `items` joined by `separator` into one string, each written by `write` (the webhook writes
/// these for every pod it injects: one allocation, not one per entry).
fn joined<T>(items: impl IntoIterator<Item = T>, separator: char, mut write: impl FnMut(&mut String, T)) -> String {
    let mut text = String::new();
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            text.push(separator);
        }
        write(&mut text, item);
    }
    text
}

/// `read` and `get` of a list annotation: its value in a pod's annotations, empty where the key
/// is absent.
macro_rules! list_annotation {
    ($type:ident, $value:ty) => {
        impl $type {
            /// The value in `annotations`: empty where the key is absent.
            pub fn read(annotations: &BTreeMap<String, String>) -> $value {
                annotations.get(Self::KEY).map(|text| Self::decode(text)).unwrap_or_default()
            }
        }
    };
}

/// An annotation's type: its doc and its key.
macro_rules! annotation_type {
    ($(#[$doc:meta])* $type:ident = $key:literal) => {
        $(#[$doc])*
        pub struct $type;

        impl $type {
            /// The annotation's key.
            pub const KEY: &'static str = $key;
        }
    };
}

/// Names, comma-separated (`a,b`): the shape of the lists of Watchers and of containers.
macro_rules! names_annotation {
    ($(#[$doc:meta])* $type:ident = $key:literal) => {
        annotation_type!($(#[$doc])* $type = $key);

        impl $type {
            /// The annotation's text for `names`.
            pub fn encode<S: AsRef<str>>(names: &[S]) -> String {
                joined(names, ',', |text, name| text.push_str(name.as_ref()))
            }

            /// The names `text` holds: trimmed, empty entries dropped.
            pub fn decode(text: &str) -> Vec<&str> {
                entries(text).collect()
            }
        }

        list_annotation!($type, Vec<&str>);
    };
}

/// Pairs, comma-separated: `name@hash` (which Watcher, injected with which spec) or
/// `container=image`.
macro_rules! pairs_annotation {
    ($(#[$doc:meta])* $type:ident = $key:literal, $separator:literal, $unpaired:expr) => {
        annotation_type!($(#[$doc])* $type = $key);

        impl $type {
            /// The annotation's text for `pairs`.
            pub fn encode<A: AsRef<str>, B: AsRef<str>>(pairs: impl IntoIterator<Item = (A, B)>) -> String {
                joined(pairs, ',', |text, (a, b)| {
                    text.push_str(a.as_ref());
                    text.push($separator);
                    text.push_str(b.as_ref());
                })
            }

            /// The pairs `text` holds, trimmed; an entry without the separator as the type says.
            pub fn decode(text: &str) -> Vec<(&str, &str)> {
                let unpaired: fn(&str) -> Option<(&str, &str)> = $unpaired;
                entries(text).filter_map(|entry| entry.split_once($separator).or_else(|| unpaired(entry))).collect()
            }
        }

        list_annotation!($type, Vec<(&str, &str)>);
    };
}

/// A moment, RFC 3339.
macro_rules! time_annotation {
    ($(#[$doc:meta])* $type:ident = $key:literal) => {
        annotation_type!($(#[$doc])* $type = $key);

        impl $type {
            /// The annotation's text for `at`.
            pub fn encode(at: jiff::Timestamp) -> String {
                at.to_string()
            }

            /// The moment `text` holds, or why it is not one.
            pub fn decode(text: &str) -> Result<jiff::Timestamp, jiff::Error> {
                text.parse()
            }

            /// The value in `annotations`; `None` where the key is absent.
            pub fn get(annotations: &BTreeMap<String, String>) -> Option<Result<jiff::Timestamp, jiff::Error>> {
                annotations.get(Self::KEY).map(|text| Self::decode(text))
            }
        }
    };
}

annotation_type! {
    /// The Watchers (of the pod's namespace) a pod asks for: their names, comma-separated, read
    /// trimmed and each once, in the order written.
    Inject = "watcher.dev/inject"
}

impl Inject {
    /// The annotation's text for `names`.
    pub fn encode<S: AsRef<str>>(names: &[S]) -> String {
        names.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(",")
    }

    /// Each name `annotations` asks for, trimmed, as written (a name written twice comes
    /// twice): [`Inject::read`] without its list.
    pub fn each(annotations: &BTreeMap<String, String>) -> impl Iterator<Item = &str> {
        annotations.get(Self::KEY).into_iter().flat_map(|text| entries(text))
    }

    /// The names `text` holds: trimmed, each once, in the order written.
    pub fn decode(text: &str) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in entries(text) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }
}

list_annotation!(Inject, Vec<&str>);

pairs_annotation! {
    /// Written by the webhook: `name@specHash` of every Watcher injected. An entry without `@`
    /// has an empty hash (never up to date).
    Injected = "watcher.dev/injected", '@', |entry| Some((entry, ""))
}

impl Injected {
    /// The name of each Watcher `annotations` says is injected, as [`Injected::read`] reads
    /// them, without its list.
    pub fn names(annotations: &BTreeMap<String, String>) -> impl Iterator<Item = &str> {
        fn name(entry: &str) -> &str {
            entry.split_once('@').map_or(entry, |(name, _)| name)
        }
        annotations.get(Self::KEY).into_iter().flat_map(|text| entries(text).map(name))
    }
}

pairs_annotation! {
    /// Written by the webhook beside [`Injected`]: `name@hash` of every Watcher injected, the
    /// hash taken of the spec without the sidecar's image. A pod whose entry equals the current
    /// spec's differs from it at most by image, and can be updated in place: decided from what
    /// the pod carries, with no revision kept (as OpenKruise's `sidecarset-hash-without-image`).
    /// An entry without `@` is skipped.
    InjectedWithoutImage = "watcher.dev/injected-without-image", '@', |_| None
}

pairs_annotation! {
    /// Written by the webhook beside [`Injected`]: `name@configHash` of every Watcher injected
    /// with config data, the hash of the configuration its ConfigMap held
    /// ([`crate::WatcherSpec::config_hash`]). A sidecar that reads its configuration once, when it
    /// starts (`envFrom`), runs that one until its pod is replaced: a pod whose entry is not the
    /// current hash is out of date. A pod without an entry was injected before the hash was
    /// carried (0.2.0): which configuration it runs is not known. An entry without `@` is
    /// skipped.
    InjectedConfig = "watcher.dev/injected-config", '@', |_| None
}

names_annotation! {
    /// Written by the webhook on every pod it injects: the names of the sidecar containers that
    /// Watchers put there (regular or native). The only containers whose image the operator
    /// may change later (an `InPlace` update; the ValidatingAdmissionPolicy
    /// `watcher-operator-pods` holds it to them), and never changed after admission.
    Sidecars = "watcher.dev/sidecars"
}

names_annotation! {
    /// Written by the webhook beside the label [`END_SIDECARS_LABEL`](crate::END_SIDECARS_LABEL)
    /// on a pod that is meant to end: the sidecars to end once the app containers have.
    EndSidecars = "watcher.dev/end-sidecars"
}

time_annotation! {
    /// Written by the operator on a pod that is meant to end, once its app containers have
    /// ended for good: when. Sidecars that end by themselves read it through the downward API
    /// ([`ENDED_FILE`](crate::ENDED_FILE)); the others are switched to the supervisor's image.
    SidecarsEnded = "watcher.dev/sidecars-ended"
}

names_annotation! {
    /// Written by the operator on a pod whose sidecars it ended but that still run past the
    /// pod's grace period and a margin: their names. The pod is counted in the Watcher's
    /// `status.pods.cannotEnd`; the annotation goes once the pod has ended.
    SidecarsCannotEnd = "watcher.dev/sidecars-cannot-end"
}

time_annotation! {
    /// Written by the pod reconciler on a pod whose sidecar image it updated in place
    /// (`updatePolicy: InPlace`): when. A pod that has not come back running and ready with
    /// the new image some minutes later stops the rollout.
    SidecarUpdated = "watcher.dev/sidecar-updated"
}

annotation_type! {
    /// Written by the webhook on a pod it admitted without a Watcher the pod asks for, because
    /// the pod would fail its namespace's Pod Security level or resource rules with it: one line
    /// per Watcher, `NAME: why` (kube-apiserver's words). The pod reconciler reports it. A line
    /// without `: ` is skipped.
    LeftOut = "watcher.dev/left-out"
}

impl LeftOut {
    /// The annotation's text for `watchers`, each with why.
    pub fn encode<A: AsRef<str>, B: AsRef<str>>(watchers: impl IntoIterator<Item = (A, B)>) -> String {
        joined(watchers, '\n', |text, (name, why)| {
            text.push_str(name.as_ref());
            text.push_str(": ");
            text.push_str(why.as_ref());
        })
    }

    /// The Watchers `text` names, each with why.
    pub fn decode(text: &str) -> Vec<(&str, &str)> {
        text.lines().filter_map(|line| line.split_once(": ")).map(|(name, why)| (name.trim(), why.trim())).collect()
    }
}

list_annotation!(LeftOut, Vec<(&str, &str)>);

pairs_annotation! {
    /// On pods and workloads whose images an ImagePolicy rewrote: the images as they were,
    /// `container=image` pairs.
    OriginalImages = "watcher.dev/original-images", '=', |_| None
}

pairs_annotation! {
    /// On workloads whose templates the images controller rewrote: the images it wrote. An
    /// image that differs from the one written there was set by the workload's owner, and the
    /// owner wins.
    RewrittenImages = "watcher.dev/rewritten-images", '=', |_| None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn requested_names_are_trimmed_and_unique() {
        let a = annotations(&[(Inject::KEY, " log-watcher, ,metrics-watcher,log-watcher,")]);
        assert_eq!(Inject::read(&a), ["log-watcher", "metrics-watcher"]);
        assert_eq!(Inject::each(&a).collect::<Vec<_>>(), ["log-watcher", "metrics-watcher", "log-watcher"]);
        assert!(Inject::read(&annotations(&[])).is_empty());
        assert!(Inject::read(&annotations(&[(Inject::KEY, "")])).is_empty());
    }

    #[test]
    fn injected_entries_round_trip() {
        let a = annotations(&[(Injected::KEY, "log-watcher@5f2c9a1e, odd ,m@1")]);
        assert_eq!(Injected::read(&a), [("log-watcher", "5f2c9a1e"), ("odd", ""), ("m", "1")]);
        assert_eq!(Injected::names(&a).collect::<Vec<_>>(), ["log-watcher", "odd", "m"]);
        assert_eq!(Injected::names(&annotations(&[])).count(), 0);
        assert_eq!(Injected::encode([("a", "1"), ("b", "2")]), "a@1,b@2");
        let a = annotations(&[(InjectedWithoutImage::KEY, "log-watcher@5f2c9a1e, odd ,m@1")]);
        assert_eq!(InjectedWithoutImage::read(&a), [("log-watcher", "5f2c9a1e"), ("m", "1")], "no hash, no entry");
    }

    #[test]
    fn lists_round_trip_and_skip_what_they_cannot_read() {
        let names = vec!["watcher", "agent"];
        assert_eq!(Sidecars::decode(&Sidecars::encode(&names)), names);
        assert_eq!(EndSidecars::decode(" watcher,, agent "), names);
        let left = vec![("log-watcher", "violates PodSecurity \"restricted:latest\": runAsNonRoot != true")];
        assert_eq!(LeftOut::decode(&LeftOut::encode(left.clone())), left);
        assert_eq!(LeftOut::decode("no colon here\nw: why"), [("w", "why")]);
        let images = vec![("app", "registry.example/app:1"), ("db", "postgres@sha256:00")];
        assert_eq!(OriginalImages::decode(&OriginalImages::encode(images.clone())), images);
        assert_eq!(RewrittenImages::decode("app, db=x"), [("db", "x")]);
    }

    /// Written as a join is: a separator between every two entries, an empty one included.
    #[test]
    fn lists_are_written_as_joined() {
        assert_eq!(Sidecars::encode(&["", "a", "b"]), ",a,b");
        assert_eq!(Sidecars::encode::<&str>(&[]), "");
        assert_eq!(OriginalImages::encode([("app", "x:1"), ("", "")]), "app=x:1,=");
        assert_eq!(LeftOut::encode([("a", "why"), ("b", "")]), "a: why\nb: ");
    }

    #[test]
    fn times_are_rfc_3339_and_anything_else_is_an_error() {
        let at: jiff::Timestamp = "2026-11-28T16:00:00Z".parse().expect("a timestamp");
        assert_eq!(SidecarsEnded::decode(&SidecarsEnded::encode(at)).ok(), Some(at));
        assert!(SidecarUpdated::decode("yesterday").is_err());
        let a = annotations(&[(SidecarUpdated::KEY, "2026-11-28T16:00:00Z")]);
        assert_eq!(SidecarUpdated::get(&a).and_then(Result::ok), Some(at));
        assert!(SidecarsEnded::get(&a).is_none());
    }

    /// Every key is the project's, and no two annotations share one.
    #[test]
    fn keys_are_the_projects_and_distinct() {
        let keys = [
            Inject::KEY,
            Injected::KEY,
            InjectedWithoutImage::KEY,
            Sidecars::KEY,
            EndSidecars::KEY,
            SidecarsEnded::KEY,
            SidecarsCannotEnd::KEY,
            SidecarUpdated::KEY,
            LeftOut::KEY,
            OriginalImages::KEY,
            RewrittenImages::KEY,
        ];
        for key in keys {
            assert!(key.starts_with(concat!("watcher.dev", "/")), "{key}");
        }
        let mut unique = keys.to_vec();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len());
    }
}
