//! The checks, one function each, in the order kube-apiserver reports them: the `baseline`
//! checks by name, then the `restricted` ones by name (a restricted check that supersedes a
//! baseline one replaces it at `restricted`). Each says from which version of the standards it
//! applies; the details are worded as kube-apiserver words them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::SecurityContext;

use super::{ContainerFacts, Failure, Level, PodFacts};

pub(super) const APPARMOR_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
pub(super) const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
pub(super) const SECCOMP_CONTAINER_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// What a check reads: the pod, the version of the standards, and the server's own version
/// (which decides what the server stores of the pod).
pub(super) struct Context<'p, 'a> {
    pub(super) pod: &'p PodFacts<'a>,
    pub(super) minor: u32,
    pub(super) server: u32,
}

type Check = fn(&Context<'_, '_>) -> Option<Failure>;

/// The checks of each level, in kube-apiserver's order (IDs sorted, baseline first).
const BASELINE: [(&str, Check); 12] = [
    ("appArmorProfile", app_armor),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("hostProbesAndHostLifecycle", probe_hosts),
    ("privileged", privileged),
    ("procMount", proc_mount_baseline),
    ("seLinuxOptions", se_linux_options),
    ("seccompProfile_baseline", seccomp_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", windows_host_process),
];

const RESTRICTED: [(&str, Check); 7] = [
    ("allowPrivilegeEscalation", allow_privilege_escalation),
    ("capabilities_restricted", capabilities_restricted),
    ("procMount_restricted", proc_mount_restricted),
    ("restrictedVolumes", restricted_volumes),
    ("runAsNonRoot", run_as_non_root),
    ("runAsUser", run_as_user),
    ("seccompProfile_restricted", seccomp_restricted),
];

/// The baseline check each restricted one replaces at `restricted`, from the version it does.
const OVERRIDES: [(&str, &str, u32); 4] = [
    ("capabilities_restricted", "capabilities_baseline", 22),
    ("procMount_restricted", "procMount", 35),
    ("restrictedVolumes", "hostPathVolumes", 0),
    ("seccompProfile_restricted", "seccompProfile_baseline", 19),
];

pub(super) fn run(context: &Context<'_, '_>, level: Level) -> Vec<Failure> {
    let overridden = |id: &str| OVERRIDES.iter().any(|(_, baseline, from)| *baseline == id && context.minor >= *from);
    let baseline = BASELINE.iter().filter(|(id, _)| level == Level::Baseline || !overridden(id));
    let restricted = RESTRICTED.iter().filter(|_| level == Level::Restricted);
    baseline.chain(restricted).filter_map(|(_, check)| check(context)).collect()
}

fn fail(reason: impl Into<String>, detail: impl Into<String>) -> Option<Failure> {
    Some(Failure { reason: reason.into(), detail: detail.into() })
}

fn pluralize<'s>(singular: &'s str, plural: &'s str, count: usize) -> &'s str {
    if count == 1 { singular } else { plural }
}

fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let quoted: Vec<String> = items.into_iter().map(|s| format!("\"{}\"", s.as_ref())).collect();
    quoted.join(", ")
}

/// `container "a"` or `containers "a", "b"`.
fn containers_named(names: &[&str]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), join_quote(names))
}

/// The names of the containers for which `bad` holds.
fn containers_where<'a>(
    context: &Context<'_, 'a>,
    mut bad: impl FnMut(&ContainerFacts<'a>, Option<&SecurityContext>) -> bool,
) -> Vec<&'a str> {
    context.pod.containers.iter().filter(|c| bad(c, c.security.as_deref())).map(|c| c.name).collect()
}

/// Whether the pod runs in a user namespace (`hostUsers: false`), which relaxes some checks
/// from 1.35.
fn user_namespace(context: &Context<'_, '_>) -> bool {
    context.pod.host_users == Some(false)
}

fn windows_exempt(context: &Context<'_, '_>) -> bool {
    context.minor >= 25 && context.pod.windows
}

fn app_armor(context: &Context<'_, '_>) -> Option<Failure> {
    let mut forbidden: Vec<String> = context
        .pod
        .annotations
        .iter()
        .filter(|(key, value)| {
            key.starts_with(APPARMOR_PREFIX)
                && !(value.is_empty() || value == "runtime/default" || value.starts_with("localhost/"))
        })
        .map(|(key, value)| format!("{key}={value:?}"))
        .collect();
    forbidden.sort();
    // Before 1.30 the server has no AppArmor fields, and words the annotations alone.
    if context.server < 30 {
        if forbidden.is_empty() {
            return None;
        }
        let reason = pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", forbidden.len());
        return fail(reason, forbidden.join(", "));
    }
    let allowed = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(profile) = context.pod.security_context.as_deref().and_then(|p| p.app_armor_profile.as_ref())
        && !allowed(&profile.type_)
    {
        setters.push("pod".to_owned());
        values.insert(profile.type_.clone());
    }
    let containers = containers_where(context, |_, security| {
        let bad = security.and_then(|s| s.app_armor_profile.as_ref()).filter(|p| !allowed(&p.type_));
        if let Some(profile) = bad {
            values.insert(profile.type_.clone());
        }
        bad.is_some()
    });
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    let mut values: Vec<String> = values.into_iter().collect();
    if !forbidden.is_empty() {
        setters.push(pluralize("annotation", "annotations", forbidden.len()).to_owned());
        values.extend(forbidden);
    }
    if setters.is_empty() {
        return None;
    }
    let reason = pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", values.len());
    fail(reason, format!("{} must not set AppArmor profile type to {}", setters.join(" and "), join_quote(&values)))
}

const DEFAULT_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added(security: Option<&SecurityContext>) -> impl Iterator<Item = &str> {
    security
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.as_ref())
        .into_iter()
        .flatten()
        .map(String::as_str)
}

fn capabilities_baseline(context: &Context<'_, '_>) -> Option<Failure> {
    let mut forbidden = BTreeSet::new();
    let containers = containers_where(context, |_, security| {
        let bad: Vec<&str> = added(security).filter(|c| !DEFAULT_CAPABILITIES.contains(c)).collect();
        forbidden.extend(bad.iter().map(|c| (*c).to_owned()));
        !bad.is_empty()
    });
    if containers.is_empty() {
        return None;
    }
    let detail = format!(
        "{} must not include {} in securityContext.capabilities.add",
        containers_named(&containers),
        join_quote(&forbidden)
    );
    fail("non-default capabilities", detail)
}

fn capabilities_restricted(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor < 22 || windows_exempt(context) {
        return None;
    }
    let missing_drop = containers_where(context, |_, security| {
        let drop = security.and_then(|s| s.capabilities.as_ref()).and_then(|c| c.drop.as_ref());
        !drop.is_some_and(|d| d.iter().any(|c| c == "ALL"))
    });
    let mut forbidden = BTreeSet::new();
    let adding = containers_where(context, |_, security| {
        let bad: Vec<&str> = added(security).filter(|c| *c != "NET_BIND_SERVICE").collect();
        forbidden.extend(bad.iter().map(|c| (*c).to_owned()));
        !bad.is_empty()
    });
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details
            .push(format!(r#"{} must set securityContext.capabilities.drop=["ALL"]"#, containers_named(&missing_drop)));
    }
    if !adding.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&forbidden)
        ));
    }
    if details.is_empty() { None } else { fail("unrestricted capabilities", details.join("; ")) }
}

fn host_namespaces(context: &Context<'_, '_>) -> Option<Failure> {
    let pod = context.pod;
    let set = [(pod.host_network, "hostNetwork=true"), (pod.host_pid, "hostPID=true"), (pod.host_ipc, "hostIPC=true")];
    let named: Vec<&str> = set.into_iter().filter(|(on, _)| *on).map(|(_, name)| name).collect();
    if named.is_empty() { None } else { fail("host namespaces", named.join(", ")) }
}

fn host_path_volumes(context: &Context<'_, '_>) -> Option<Failure> {
    let volumes: Vec<&str> =
        context.pod.volumes.iter().filter(|(_, kind)| *kind == "hostPath").map(|(name, _)| *name).collect();
    if volumes.is_empty() {
        return None;
    }
    fail("hostPath volumes", format!("{} {}", pluralize("volume", "volumes", volumes.len()), join_quote(&volumes)))
}

fn host_ports(context: &Context<'_, '_>) -> Option<Failure> {
    let mut ports = BTreeSet::new();
    let containers = containers_where(context, |c, _| {
        ports.extend(c.host_ports.iter().map(|p| p.to_string()));
        !c.host_ports.is_empty()
    });
    if containers.is_empty() {
        return None;
    }
    // Sorted as strings, as the server sorts them.
    let ports: Vec<String> = ports.into_iter().collect();
    let detail = format!(
        "{} {} {} {}",
        containers_named(&containers),
        pluralize("uses", "use", containers.len()),
        pluralize("hostPort", "hostPorts", ports.len()),
        ports.join(", ")
    );
    fail("hostPort", detail)
}

fn probe_hosts(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor < 34 {
        return None;
    }
    let mut hosts = BTreeSet::new();
    let containers: BTreeSet<&str> = containers_where(context, |c, _| {
        hosts.extend(c.probe_hosts.iter().copied());
        !c.probe_hosts.is_empty()
    })
    .into_iter()
    .collect();
    if containers.is_empty() {
        return None;
    }
    let containers: Vec<&str> = containers.into_iter().collect();
    let detail = format!(
        "{} {} {} {}",
        containers_named(&containers),
        pluralize("uses", "use", containers.len()),
        pluralize("probe or lifecycle host", "probe or lifecycle hosts", hosts.len()),
        join_quote(&hosts)
    );
    fail("probe or lifecycle host", detail)
}

fn privileged(context: &Context<'_, '_>) -> Option<Failure> {
    let containers = containers_where(context, |_, s| s.and_then(|s| s.privileged) == Some(true));
    if containers.is_empty() {
        return None;
    }
    fail("privileged", format!("{} must not set securityContext.privileged=true", containers_named(&containers)))
}

fn proc_mount(context: &Context<'_, '_>) -> Option<Failure> {
    // Before 1.33 kube-apiserver drops `procMount` (its feature is off by default): the pod
    // as prepared has none (see `PodFacts::prepared`).
    let mut types = BTreeSet::new();
    let containers = containers_where(context, |_, security| {
        let bad = security.and_then(|s| s.proc_mount.as_deref()).filter(|p| *p != "Default");
        types.extend(bad.map(str::to_owned));
        bad.is_some()
    });
    if containers.is_empty() {
        return None;
    }
    let detail =
        format!("{} must not set securityContext.procMount to {}", containers_named(&containers), join_quote(&types));
    fail("procMount", detail)
}

fn proc_mount_baseline(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor >= 35 && user_namespace(context) {
        return None;
    }
    proc_mount(context)
}

fn proc_mount_restricted(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor < 35 {
        return None;
    }
    proc_mount(context)
}

fn se_linux_options(context: &Context<'_, '_>) -> Option<Failure> {
    let allowed = |t: &str| {
        matches!(t, "" | "container_t" | "container_init_t" | "container_kvm_t")
            || (context.minor >= 31 && t == "container_engine_t")
    };
    let mut bad_types = BTreeSet::new();
    let (mut user, mut role) = (false, false);
    let mut valid = |options: &k8s_openapi::api::core::v1::SELinuxOptions| {
        let kind = options.type_.as_deref().unwrap_or_default();
        let mut ok = true;
        if !allowed(kind) {
            ok = false;
            bad_types.insert(kind.to_owned());
        }
        if options.user.as_deref().is_some_and(|u| !u.is_empty()) {
            ok = false;
            user = true;
        }
        if options.role.as_deref().is_some_and(|r| !r.is_empty()) {
            ok = false;
            role = true;
        }
        ok
    };
    let mut setters = Vec::new();
    if let Some(options) = context.pod.security_context.as_deref().and_then(|p| p.se_linux_options.as_ref())
        && !valid(options)
    {
        setters.push("pod".to_owned());
    }
    let containers =
        containers_where(context, |_, s| s.and_then(|s| s.se_linux_options.as_ref()).is_some_and(|o| !valid(o)));
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!("{} {}", pluralize("type", "types", bad_types.len()), join_quote(&bad_types)));
    }
    if user {
        data.push("user may not be set".to_owned());
    }
    if role {
        data.push("role may not be set".to_owned());
    }
    let detail = format!("{} set forbidden securityContext.seLinuxOptions: {}", setters.join(" and "), data.join("; "));
    fail("seLinuxOptions", detail)
}

fn valid_seccomp(kind: &str) -> bool {
    kind == "RuntimeDefault" || kind == "Localhost"
}

/// The seccomp profiles set to anything but `RuntimeDefault` or `Localhost`: who sets them (the
/// pod, the containers), and the values; and the containers that set none.
fn seccomp_setters<'a>(context: &Context<'_, 'a>) -> (Vec<String>, BTreeSet<String>, Vec<&'a str>, bool) {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(profile) = context.pod.security_context.as_deref().and_then(|p| p.seccomp_profile.as_ref()) {
        if valid_seccomp(&profile.type_) {
            pod_set = true;
        } else {
            setters.push("pod".to_owned());
            values.insert(profile.type_.clone());
        }
    }
    let mut unset = Vec::new();
    let containers = containers_where(context, |c, security| match security.and_then(|s| s.seccomp_profile.as_ref()) {
        Some(profile) if !valid_seccomp(&profile.type_) => {
            values.insert(profile.type_.clone());
            true
        }
        Some(_) => false,
        None => {
            unset.push(c.name);
            false
        }
    });
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    (setters, values, unset, pod_set)
}

fn seccomp_baseline(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor < 19 {
        let valid = |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
        let mut forbidden = BTreeSet::new();
        for (key, value) in &context.pod.annotations {
            let read = key == SECCOMP_POD_ANNOTATION
                || key
                    .strip_prefix(SECCOMP_CONTAINER_PREFIX)
                    .is_some_and(|name| context.pod.containers.iter().any(|c| c.name == name));
            if read && !valid(value.as_ref()) {
                forbidden.insert(format!("{key}={value:?}"));
            }
        }
        if forbidden.is_empty() {
            return None;
        }
        let detail = format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            forbidden.into_iter().collect::<Vec<_>>().join(", ")
        );
        return fail("seccompProfile", detail);
    }
    let (setters, values, _, _) = seccomp_setters(context);
    if setters.is_empty() {
        return None;
    }
    let detail = format!(
        "{} must not set securityContext.seccompProfile.type to {}",
        setters.join(" and "),
        join_quote(&values)
    );
    fail("seccompProfile", detail)
}

fn seccomp_restricted(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor < 19 || windows_exempt(context) {
        return None;
    }
    let (setters, values, unset, pod_set) = seccomp_setters(context);
    if !setters.is_empty() {
        let detail = format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        );
        return fail("seccompProfile", detail);
    }
    if unset.is_empty() || pod_set {
        return None;
    }
    let detail = format!(
        r#"pod or {} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
        containers_named(&unset)
    );
    fail("seccompProfile", detail)
}

fn sysctls(context: &Context<'_, '_>) -> Option<Failure> {
    let allowed: &[(&str, u32)] = &[
        ("kernel.shm_rmid_forced", 0),
        ("net.ipv4.ip_local_port_range", 0),
        ("net.ipv4.tcp_syncookies", 0),
        ("net.ipv4.ping_group_range", 0),
        ("net.ipv4.ip_unprivileged_port_start", 0),
        ("net.ipv4.ip_local_reserved_ports", 27),
        ("net.ipv4.tcp_keepalive_time", 29),
        ("net.ipv4.tcp_fin_timeout", 29),
        ("net.ipv4.tcp_keepalive_intvl", 29),
        ("net.ipv4.tcp_keepalive_probes", 29),
        ("net.ipv4.tcp_rmem", 32),
        ("net.ipv4.tcp_wmem", 32),
        ("net.ipv4.tcp_slow_start_after_idle", 37),
        ("net.ipv4.tcp_notsent_lowat", 37),
    ];
    let sysctls = context.pod.security_context.as_deref().and_then(|p| p.sysctls.as_ref());
    let forbidden: Vec<&str> = sysctls
        .into_iter()
        .flatten()
        .map(|s| s.name.as_str())
        .filter(|name| !allowed.iter().any(|(safe, from)| safe == name && context.minor >= *from))
        .collect();
    if forbidden.is_empty() { None } else { fail("forbidden sysctls", forbidden.join(", ")) }
}

fn windows_host_process(context: &Context<'_, '_>) -> Option<Failure> {
    let host_process = |options: Option<&k8s_openapi::api::core::v1::WindowsSecurityContextOptions>| {
        options.and_then(|o| o.host_process) == Some(true)
    };
    let mut setters = Vec::new();
    if host_process(context.pod.security_context.as_deref().and_then(|p| p.windows_options.as_ref())) {
        setters.push("pod".to_owned());
    }
    let containers = containers_where(context, |_, s| host_process(s.and_then(|s| s.windows_options.as_ref())));
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    if setters.is_empty() {
        return None;
    }
    fail(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters.join(" and ")),
    )
}

fn allow_privilege_escalation(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor < 8 || windows_exempt(context) {
        return None;
    }
    let containers = containers_where(context, |_, s| s.and_then(|s| s.allow_privilege_escalation) != Some(false));
    if containers.is_empty() {
        return None;
    }
    let detail = format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_named(&containers));
    fail("allowPrivilegeEscalation != false", detail)
}

const RESTRICTED_VOLUME_TYPES: [&str; 21] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(context: &Context<'_, '_>) -> Option<Failure> {
    let allowed = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    let mut types = BTreeSet::new();
    let mut volumes = Vec::new();
    for (name, kind) in &context.pod.volumes {
        if allowed.contains(kind) {
            continue;
        }
        volumes.push(*name);
        types.insert(if RESTRICTED_VOLUME_TYPES.contains(kind) { *kind } else { "unknown" });
    }
    if volumes.is_empty() {
        return None;
    }
    let detail = format!(
        "{} {} {} {} {}",
        pluralize("volume", "volumes", volumes.len()),
        join_quote(&volumes),
        pluralize("uses", "use", volumes.len()),
        pluralize("restricted volume type", "restricted volume types", types.len()),
        join_quote(&types)
    );
    fail("restricted volume types", detail)
}

fn run_as_non_root(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor >= 35 && user_namespace(context) {
        return None;
    }
    let mut setters = Vec::new();
    let pod = context.pod.security_context.as_deref().and_then(|p| p.run_as_non_root);
    if pod == Some(false) {
        setters.push("pod".to_owned());
    }
    let explicit = containers_where(context, |_, s| s.and_then(|s| s.run_as_non_root) == Some(false));
    let implicit = containers_where(context, |_, s| s.and_then(|s| s.run_as_non_root).is_none() && pod != Some(true));
    if !explicit.is_empty() {
        setters.push(containers_named(&explicit));
    }
    if !setters.is_empty() {
        let detail = format!("{} must not set securityContext.runAsNonRoot=false", setters.join(" and "));
        return fail("runAsNonRoot != true", detail);
    }
    if implicit.is_empty() {
        return None;
    }
    let detail = format!("pod or {} must set securityContext.runAsNonRoot=true", containers_named(&implicit));
    fail("runAsNonRoot != true", detail)
}

fn run_as_user(context: &Context<'_, '_>) -> Option<Failure> {
    if context.minor < 23 || (context.minor >= 35 && user_namespace(context)) {
        return None;
    }
    let mut setters = Vec::new();
    if context.pod.security_context.as_deref().and_then(|p| p.run_as_user) == Some(0) {
        setters.push("pod".to_owned());
    }
    let containers = containers_where(context, |_, s| s.and_then(|s| s.run_as_user) == Some(0));
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    if setters.is_empty() {
        return None;
    }
    fail("runAsUser=0", format!("{} must not set runAsUser=0", setters.join(" and ")))
}
