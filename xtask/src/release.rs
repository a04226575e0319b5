//! `cargo xtask release`: one command from a commit to a release in a registry.
//!
//! Every check comes before the first push: the version (semver, the workspace's, a CHANGELOG
//! section), the tree (clean), the key, the registry (reachable, and holding nothing of this
//! version with other contents: a tag is never overwritten), the binaries (each says the
//! version and the commit). Then the images go first, each with its SBOM and signature, and the
//! chart that names them last: a failure leaves nothing that points at what is not there, and a
//! rerun skips what is already pushed and finishes the job.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::{Value, json};

use crate::oci::{self, Layout};
use crate::platform::{AMD64, PLATFORMS, Platform};
use crate::registry::Registry;
use crate::sign::{self, Signer};
use crate::{chart, cmd, layout, rootfs, sbom};

/// `cargo xtask release --version V --registry HOST[:PORT][/PATH] [--plain-http] [--key FILE]`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The version to release (semver, no leading `v`): the workspace's version in Cargo.toml,
    /// with its section in CHANGELOG.md.
    #[arg(long)]
    version: String,
    /// Where to push: HOST[:PORT][/PATH]. The images go to PATH/watcher-operator,
    /// PATH/watcher-agent and PATH/watcher-supervise, the chart to PATH/charts/watcher-operator.
    #[arg(long)]
    registry: String,
    /// Speak plain HTTP to the registry (a registry on this machine, without TLS).
    #[arg(long)]
    plain_http: bool,
    /// Sign the images and the chart with this key (PEM PKCS#8, ECDSA P-256). Without it the
    /// release is not signed, and says so.
    #[arg(long)]
    key: Option<PathBuf>,
    /// Release the binaries in this directory instead of building them with the shipped
    /// profiles: `linux-amd64/` and `linux-arm64/`, each with watcher-operator, watcher-agent
    /// and watcher-supervise built from this commit. CI releases the build its tests run.
    #[arg(long)]
    binaries: Option<PathBuf>,
    /// Where to write the release's files (default target/release/V).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// An image of the release: its binary, how it is built, what it runs.
pub(crate) struct Image {
    pub(crate) name: &'static str,
    /// cargo's arguments for the binary, and where it lands under target/.
    pub(crate) build: &'static [&'static str],
    pub(crate) built: &'static str,
    entrypoint: &'static [&'static str],
    cmd: &'static [&'static str],
    env: &'static [&'static str],
    ports: &'static [u16],
    title: &'static str,
}

pub(crate) const IMAGES: [Image; 3] = [
    Image {
        name: "watcher-operator",
        build: &["build", "--locked", "--profile", "dist", "-p", "watcher-operator", "--bin", "watcher-operator"],
        built: "dist/watcher-operator",
        entrypoint: &["/usr/local/bin/watcher-operator"],
        cmd: &["run"],
        // glibc's malloc: buffers of 128 KiB and more mapped and unmapped whole (BENCHMARKS.md,
        // "Start-up at 100,000 pods").
        env: &["PATH=/usr/local/bin", "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072"],
        ports: &[8443, 8080, 8081],
        title: "watcher-operator: the admission webhook and the controllers",
    },
    Image {
        name: "watcher-agent",
        // Static, as the supervisor: no libc, loader or libgcc_s pages mapped in every watched
        // pod (0.7 MiB of resident memory, BENCHMARKS.md), and no shared library in its image.
        build: &[
            "rustc",
            "--locked",
            "--profile",
            "agent",
            "-p",
            "watcher-agent",
            "--bin",
            "watcher-agent",
            "--",
            "-C",
            "target-feature=+crt-static",
        ],
        built: "agent/watcher-agent",
        entrypoint: &["/usr/local/bin/watcher-agent"],
        cmd: &["run"],
        env: &["PATH=/usr/local/bin"],
        ports: &[9102],
        title: "watcher-agent: the Watcher sidecar that turns an app's logs into metrics, Events and alerts",
    },
    Image {
        name: "watcher-supervise",
        build: &[
            "rustc",
            "--locked",
            "--profile",
            "supervise",
            "-p",
            "watcher-supervise",
            "--bin",
            "watcher-supervise",
            "--",
            "-C",
            "target-feature=+crt-static",
        ],
        built: "supervise/watcher-supervise",
        entrypoint: &["/usr/local/bin/watcher-supervise", "ended"],
        cmd: &[],
        env: &[],
        ports: &[],
        title: "watcher-supervise: ends a Watcher's sidecar with its app",
    },
];

/// What was checked before anything is built or pushed.
struct Plan {
    root: PathBuf,
    version: String,
    registry: Registry,
    signer: Option<Signer>,
    /// The full commit id, and its time (RFC 3339, UTC).
    revision: String,
    created: String,
    notes: String,
    out: PathBuf,
    work: PathBuf,
}

/// What a release is made of, packed and not yet pushed.
struct Packed {
    images: Vec<PackedImage>,
    chart: PathBuf,
}

struct PackedImage {
    name: &'static str,
    repository: String,
    layout: PathBuf,
    /// The index's digest.
    digest: String,
    /// Each platform's SBOM, attached to its manifest.
    sboms: Vec<PackedSbom>,
}

struct PackedSbom {
    platform: Platform,
    /// The platform's manifest, which the SBOM is attached to.
    manifest: String,
    sbom: Vec<u8>,
    layout: PathBuf,
    digest: String,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let plan = Plan::check(args)?;
    // Each platform's toolchain is there before anything is built.
    if args.binaries.is_none() {
        for platform in &PLATFORMS {
            platform.cargo(&plan.root.join("target/aarch64"))?;
        }
    }
    // The registry answers (and speaks the protocol asked for) before an 18-minute build.
    plan.registry.manifest(&plan.registry.repository(IMAGES[0].name), &plan.version)?;
    let binaries = plan.binaries(args.binaries.as_deref())?;
    plan.check_binaries(&binaries)?;
    let packed = plan.pack(&binaries)?;
    let chart_digest = plan.refuse_conflicts(&packed)?;
    let digests = plan.publish(&packed, chart_digest)?;
    plan.write_files(&packed, &digests)?;
    println!("released {} to {}:", plan.version, plan.registry.repository("").trim_end_matches('/'));
    for (name, reference) in &digests {
        println!("  {name:<18} {reference}");
    }
    if plan.signer.is_none() {
        println!("  (not signed: no --key)");
    }
    println!("  files: {}", plan.out.display());
    println!("  the release's record, for CI's upgrade test (docs/release.md), in {LAST_RELEASE}:");
    println!("    {} {}", plan.version, plan.revision);
    Ok(())
}

/// The file that names the last release ("VERSION COMMIT"), from which CI's upgrade test starts
/// (`.ci/e2e` builds it from its commit where no registry of the machine keeps it).
const LAST_RELEASE: &str = ".ci/last-release";

impl Plan {
    /// The version, the registry, the key, the tree and the release notes, checked.
    fn check(args: &Args) -> anyhow::Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("the workspace")?.to_owned();
        let version = checked_version(&args.version, &std::fs::read_to_string(root.join("Cargo.toml"))?)?;
        let registry = Registry::parse(&args.registry, args.plain_http)?;
        let signer = args.key.as_deref().map(Signer::load).transpose()?;
        let git = |a: &[&str]| cmd::run("git", &[&["-C", &root.display().to_string()], a].concat());
        let changes = uncommitted_changes(&root)?;
        if !changes.is_empty() {
            bail!("the tree has changes that are not committed (a release is of a commit):\n{changes}");
        }
        let revision = git(&["rev-parse", "HEAD"])?.trim().to_owned();
        let seconds: i64 = git(&["log", "-1", "--format=%ct", "HEAD"])?.trim().parse().context("the commit's time")?;
        let created = jiff::Timestamp::from_second(seconds)?.to_string();
        let notes =
            release_notes(&std::fs::read_to_string(root.join("CHANGELOG.md")).context("CHANGELOG.md")?, &version)?;
        let out = args.out.clone().unwrap_or_else(|| root.join("target/release").join(&version));
        let work = root.join("target/xtask").join(&version);
        Ok(Self { root, version, registry, signer, revision, created, notes, out, work })
    }

    /// The three binaries of each platform, by platform: built with the shipped profiles, or
    /// the ones given.
    fn binaries(&self, given: Option<&Path>) -> anyhow::Result<Vec<Vec<PathBuf>>> {
        let Some(dir) = given else {
            return PLATFORMS.iter().map(|platform| self.build(*platform)).collect();
        };
        PLATFORMS
            .iter()
            .map(|platform| {
                IMAGES
                    .iter()
                    .map(|i| {
                        let path = dir.join(platform.dir()).join(i.name);
                        path.is_file()
                            .then_some(path)
                            .with_context(|| format!("--binaries {}: no {}/{}", dir.display(), platform.dir(), i.name))
                    })
                    .collect()
            })
            .collect()
    }

    /// Builds the three binaries of `platform` with the shipped profiles: amd64 in target/,
    /// arm64 by Debian's toolchain in target/aarch64/.
    fn build(&self, platform: Platform) -> anyhow::Result<Vec<PathBuf>> {
        let target_dir = self.root.join("target/aarch64");
        let mut built = Vec::new();
        for image in &IMAGES {
            let (args, path) = build_of(image, platform, &self.root.join("target"), &target_dir);
            eprintln!("building {} for {} (cargo {})", image.name, platform.name(), args.join(" "));
            let mut cargo = platform.cargo(&target_dir)?;
            let status = cargo.args(&args).current_dir(&self.root).status().context("cannot run cargo")?;
            if !status.success() {
                bail!("building {} for {} failed ({status})", image.name, platform.name());
            }
            if image.name == "watcher-agent" && platform == AMD64 {
                layout::laid_out(&self.root, &args, &path, platform.cargo(&target_dir)?)?;
            }
            built.push(path);
        }
        Ok(built)
    }

    /// Each binary says this version, this commit (unchanged) and its platform's target, as the
    /// images will run it (an arm64 one under qemu).
    fn check_binaries(&self, binaries: &[Vec<PathBuf>]) -> anyhow::Result<()> {
        for (platform, binaries) in PLATFORMS.iter().zip(binaries) {
            for (image, binary) in IMAGES.iter().zip(binaries) {
                let said = platform.run(binary, &["--version"], None)?;
                let line = said.lines().next().unwrap_or_default();
                let words: Vec<&str> = line.split_whitespace().collect();
                if words.first() != Some(&image.name) || words.get(1) != Some(&self.version.as_str()) {
                    bail!(
                        "{} --version says {line:?}, not version {}: built from another tree?",
                        binary.display(),
                        self.version
                    );
                }
                let commit = line.split("commit ").nth(1).and_then(|r| r.split([',', ')']).next()).unwrap_or_default();
                if commit.is_empty() || commit.ends_with("-dirty") || !self.revision.starts_with(commit) {
                    bail!("{} was built from commit {commit:?}, not from {} as it is", binary.display(), self.revision);
                }
                if !line.contains(&format!("target {})", platform.target)) {
                    bail!("{} says {line:?}: not built for {}", binary.display(), platform.target);
                }
            }
        }
        Ok(())
    }

    /// The images' layouts and SBOMs (one thread each: most of it is gzip), and the chart's
    /// archive.
    fn pack(&self, binaries: &[Vec<PathBuf>]) -> anyhow::Result<Packed> {
        let sums = sbom::checksums(&std::fs::read_to_string(self.root.join("Cargo.lock"))?);
        let images = std::thread::scope(|scope| {
            let packing: Vec<_> = IMAGES
                .iter()
                .enumerate()
                .map(|(i, image)| {
                    let of_image: Vec<&Path> = binaries.iter().map(|b| b[i].as_path()).collect();
                    let sums = &sums;
                    scope.spawn(move || self.pack_image(image, &of_image, sums))
                })
                .collect();
            packing
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("packing panicked"))))
                .collect::<anyhow::Result<Vec<_>>>()
        })?;
        let seconds = self.created.parse::<jiff::Timestamp>()?.as_second();
        let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds.try_into()?);
        let chart = chart::package(&self.root, &self.work, &self.work, &self.version, mtime, |name| {
            self.registry.repository(name)
        })?;
        Ok(Packed { images, chart })
    }

    /// `image` of `binaries` (one a platform, in [`PLATFORMS`]' order): its index, and an SBOM
    /// for each platform's manifest.
    fn pack_image(
        &self,
        image: &Image,
        binaries: &[&Path],
        sums: &std::collections::BTreeMap<String, String>,
    ) -> anyhow::Result<PackedImage> {
        let repository = self.registry.repository(image.name);
        let layout = self.work.join("oci").join(image.name);
        let platforms = PLATFORMS
            .iter()
            .zip(binaries)
            .map(|(platform, binary)| {
                let foreign = platform.foreign_root();
                let foreign = foreign.as_ref().map(|(root, multiarch)| (root.as_path(), *multiarch));
                Ok((platform.architecture, rootfs::files(binary, foreign)?))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (index, manifests) =
            oci::image(&Layout::create(&layout)?, &platforms, &self.image_config(image), &self.version)?;
        let digest = index["digest"].as_str().context("a digest")?.to_owned();
        let mut sboms = Vec::new();
        for (platform, manifest) in PLATFORMS.iter().zip(manifests) {
            let components = sbom::components(image.name, platform.target)?;
            let sbom = sbom::document(image.name, &self.version, &self.created, &components, sums)?;
            let sbom_layout = self.work.join("sbom").join(image.name).join(platform.dir());
            let tag = sign::tag_for(&manifest, "sbom");
            let attached = oci::artifact(&Layout::create(&sbom_layout)?, sbom::MEDIA_TYPE, &sbom, json!({}), &tag)?;
            let digest = attached["digest"].as_str().context("a digest")?.to_owned();
            sboms.push(PackedSbom { platform: *platform, manifest, sbom, layout: sbom_layout, digest });
        }
        Ok(PackedImage { name: image.name, repository, layout, digest, sboms })
    }

    fn image_config(&self, image: &Image) -> oci::ImageConfig {
        let labels = [
            ("org.opencontainers.image.title", image.name.to_owned()),
            ("org.opencontainers.image.description", image.title.to_owned()),
            ("org.opencontainers.image.version", self.version.clone()),
            ("org.opencontainers.image.revision", self.revision.clone()),
            ("org.opencontainers.image.source", env!("CARGO_PKG_REPOSITORY").to_owned()),
            ("org.opencontainers.image.created", self.created.clone()),
            ("org.opencontainers.image.licenses", env!("CARGO_PKG_LICENSE").to_owned()),
        ];
        oci::ImageConfig {
            entrypoint: image.entrypoint.iter().map(|s| (*s).to_owned()).collect(),
            cmd: image.cmd.iter().map(|s| (*s).to_owned()).collect(),
            env: image.env.iter().map(|s| (*s).to_owned()).collect(),
            ports: image.ports.to_vec(),
            labels: labels.into_iter().map(|(k, v)| (k.to_owned(), Value::String(v))).collect(),
            created: self.created.clone(),
        }
    }

    /// Refuses, before any push, a tag of this version that holds other contents: an image,
    /// its SBOM or signature, the chart. The chart's manifest digest when it is there already.
    fn refuse_conflicts(&self, packed: &Packed) -> anyhow::Result<Option<String>> {
        let differs = |repository: &str, tag: &str, ours: &str| -> anyhow::Result<()> {
            match self.registry.manifest(repository, tag)? {
                Some(theirs) if oci::digest(&theirs) != ours => {
                    bail!(
                        "{repository}:{tag} is in the registry with other contents ({}, this build {ours}): a release is never overwritten; release another version",
                        oci::digest(&theirs)
                    )
                }
                _ => Ok(()),
            }
        };
        for image in &packed.images {
            differs(&image.repository, &self.version, &image.digest)?;
            for sbom in &image.sboms {
                differs(&image.repository, &sign::tag_for(&sbom.manifest, "sbom"), &sbom.digest)?;
            }
            self.refuse_other_signature(&image.repository, &image.digest)?;
        }
        let repository = self.registry.repository("charts/watcher-operator");
        let Some(theirs) = self.registry.manifest(&repository, &self.version)? else { return Ok(None) };
        let manifest: Value = serde_json::from_slice(&theirs).context("the chart's manifest in the registry")?;
        let ours = oci::digest(&std::fs::read(&packed.chart)?);
        let layers = manifest["layers"].as_array().map(Vec::as_slice).unwrap_or_default();
        if !layers.iter().any(|l| l["digest"] == ours.as_str()) {
            bail!(
                "{repository}:{} is in the registry with another chart: a release is never overwritten; release another version",
                self.version
            );
        }
        let digest = oci::digest(&theirs);
        self.refuse_other_signature(&repository, &digest)?;
        Ok(Some(digest))
    }

    /// A signature tag of `digest` that is not this key's over this payload is never replaced.
    fn refuse_other_signature(&self, repository: &str, digest: &str) -> anyhow::Result<()> {
        let Some(signer) = &self.signer else { return Ok(()) };
        let tag = sign::tag_for(digest, "sig");
        match self.registry.manifest(repository, &tag)? {
            Some(existing) if !signed_by(&existing, &sign::payload(repository, digest), signer) => {
                bail!("{repository}:{tag} holds a signature of another key: not overwritten")
            }
            _ => Ok(()),
        }
    }

    /// Pushes what is not there yet: each image, its SBOM, its signature; then the chart and
    /// its signature. Every reference, by digest.
    fn publish(&self, packed: &Packed, chart_digest: Option<String>) -> anyhow::Result<Vec<(String, String)>> {
        let mut references = Vec::new();
        for image in &packed.images {
            self.push_once(&image.layout, &self.version, &image.repository, &image.digest)?;
            for sbom in &image.sboms {
                let tag = sign::tag_for(&sbom.manifest, "sbom");
                self.push_once(&sbom.layout, &tag, &image.repository, &sbom.digest)?;
            }
            self.sign(&image.repository, &image.digest)?;
            references.push((image.name.to_owned(), format!("{}:{}@{}", image.repository, self.version, image.digest)));
        }
        let repository = self.registry.repository("charts/watcher-operator");
        let digest = match chart_digest {
            Some(digest) => digest,
            None => self.registry.push_chart(&packed.chart)?,
        };
        self.sign(&repository, &digest)?;
        references.push(("chart".to_owned(), format!("oci://{repository}:{}@{digest}", self.version)));
        Ok(references)
    }

    fn push_once(&self, layout: &Path, tag: &str, repository: &str, digest: &str) -> anyhow::Result<()> {
        if self.registry.manifest(repository, tag)?.is_some_and(|m| oci::digest(&m) == digest) {
            return Ok(());
        }
        self.registry.push(layout, tag, repository)?;
        match self.registry.manifest(repository, tag)? {
            Some(pushed) if oci::digest(&pushed) == digest => Ok(()),
            _ => bail!("{repository}:{tag} does not read back as {digest} after the push"),
        }
    }

    /// The cosign signature of `digest` in `repository`, unless this key's is there.
    fn sign(&self, repository: &str, digest: &str) -> anyhow::Result<()> {
        let Some(signer) = &self.signer else { return Ok(()) };
        let payload = sign::payload(repository, digest);
        let tag = sign::tag_for(digest, "sig");
        if self.registry.manifest(repository, &tag)?.is_some_and(|m| signed_by(&m, &payload, signer)) {
            return Ok(());
        }
        let signature = base64::engine::general_purpose::STANDARD.encode(signer.sign(&payload)?);
        let dir = self.work.join("sig").join(oci::digest(repository.as_bytes()).trim_start_matches("sha256:"));
        let layout = Layout::create(&dir)?;
        let manifest = oci::artifact(&layout, sign::PAYLOAD, &payload, json!({sign::ANNOTATION: signature}), &tag)?;
        let manifest = manifest["digest"].as_str().context("a digest")?.to_owned();
        self.push_once(&dir, &tag, repository, &manifest)
    }

    /// The release's files: the chart archive, the SBOMs, the public key, the digests, the
    /// release notes, and `SHA256SUMS` of them all.
    fn write_files(&self, packed: &Packed, digests: &[(String, String)]) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.out)?;
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let chart_name = format!("watcher-operator-{}.tgz", self.version);
        files.push((chart_name, std::fs::read(&packed.chart)?));
        for image in &packed.images {
            for sbom in &image.sboms {
                files.push((format!("{}-{}.cdx.json", image.name, sbom.platform.dir()), sbom.sbom.clone()));
            }
        }
        if let Some(signer) = &self.signer {
            files.push(("cosign.pub".into(), signer.public_pem().into_bytes()));
        }
        let listed: String = digests.iter().map(|(name, reference)| format!("{name} {reference}\n")).collect();
        files.push(("digests.txt".into(), listed.into_bytes()));
        files.push(("release-notes.md".into(), self.notes.clone().into_bytes()));
        let mut sums = String::new();
        for (name, bytes) in &files {
            std::fs::write(self.out.join(name), bytes)?;
            sums.push_str(&format!("{}  {name}\n", oci::digest(bytes).trim_start_matches("sha256:")));
        }
        std::fs::write(self.out.join("SHA256SUMS"), sums)?;
        Ok(())
    }
}

/// cargo's arguments for `image`'s binary on `platform`, and where it lands: the native one in
/// `target`, another with `--target` (before rustc's own arguments) in `foreign_target`.
fn build_of(image: &Image, platform: Platform, target: &Path, foreign_target: &Path) -> (Vec<&'static str>, PathBuf) {
    let mut args: Vec<&'static str> = image.build.to_vec();
    if platform == AMD64 {
        return (args, target.join(image.built));
    }
    let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    args.splice(at..at, ["--target", platform.target]);
    (args, foreign_target.join(platform.target).join(image.built))
}

/// Whether a signature manifest holds `signer`'s signature over `payload`.
fn signed_by(manifest: &[u8], payload: &[u8], signer: &Signer) -> bool {
    let Ok(manifest) = serde_json::from_slice::<Value>(manifest) else { return false };
    let layers = manifest["layers"].as_array().map(Vec::as_slice).unwrap_or_default();
    layers.iter().any(|layer| {
        layer["digest"] == oci::digest(payload).as_str()
            && layer["annotations"][sign::ANNOTATION].as_str().is_some_and(|s| signer.verifies(payload, s))
    })
}

/// `given`, checked: semver without a leading `v`, and the workspace's version (what the
/// binaries will say).
fn checked_version(given: &str, cargo_toml: &str) -> anyhow::Result<String> {
    if let Some(bare) = given.strip_prefix('v') {
        bail!("--version {given}: without the leading v ({bare}); the git tag is v{bare}");
    }
    let version = semver::Version::parse(given)
        .with_context(|| format!("--version {given:?} is not a semantic version (MAJOR.MINOR.PATCH[-PRE])"))?;
    if !version.build.is_empty() {
        bail!("--version {given}: no build metadata (+…): an OCI tag cannot hold '+'");
    }
    let workspace = cargo_toml
        .split("[workspace.package]")
        .nth(1)
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim().trim_matches('"'))
        .context("Cargo.toml has no [workspace.package] version")?;
    if workspace != given {
        bail!(
            "--version {given}, but the workspace is version {workspace}: set [workspace.package] version in Cargo.toml (and CHANGELOG.md) first"
        );
    }
    Ok(version.to_string())
}

/// The CHANGELOG's section of `version` (Keep a Changelog: `## [V] - DATE` up to the next
/// `## [`), without its heading.
fn release_notes(changelog: &str, version: &str) -> anyhow::Result<String> {
    let heading = format!("## [{version}]");
    let start = changelog.lines().position(|l| l.starts_with(&heading));
    let Some(start) = start else { bail!("CHANGELOG.md has no section {heading}: write the release's notes first") };
    let lines: Vec<&str> = changelog.lines().skip(start + 1).take_while(|l| !l.starts_with("## [")).collect();
    let notes = lines.join("\n").trim().to_owned();
    if notes.is_empty() {
        bail!("CHANGELOG.md's section {heading} is empty");
    }
    Ok(notes + "\n")
}

/// What `git status` says differs from the commit at `root` (empty when nothing does).
/// `--no-optional-locks`: the index is read, never refreshed and written. A fresh clone's index
/// holds entries git checks again and rewrites at the first `status`; that write is a change to
/// a file the build stamp follows (build-info's build script), and every crate that uses the
/// stamp would be linked again by the next build, the test binaries a CI run executes among them.
fn uncommitted_changes(root: &Path) -> anyhow::Result<String> {
    let root = root.display().to_string();
    let said = cmd::run("git", &["-C", &root, "--no-optional-locks", "status", "--porcelain"])?;
    Ok(said.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CARGO: &str = "[workspace]\n[workspace.package]\nversion = \"0.2.0\"\nedition = \"2024\"\n";

    #[test]
    fn a_version_is_semver_and_the_workspaces() {
        assert_eq!(checked_version("0.2.0", CARGO).expect("ok"), "0.2.0");
        let said = |v: &str| checked_version(v, CARGO).expect_err("refused").to_string();
        assert!(said("v0.2.0").contains("without the leading v"));
        assert!(said("0.2").contains("not a semantic version"));
        assert!(said("0.2.0+build.1").contains("build metadata"));
        assert!(said("0.3.0").contains("the workspace is version 0.2.0"));
    }

    /// arm64's binaries are built with `--target` before rustc's own arguments (the static
    /// link), in their own target directory; amd64's as they were.
    #[test]
    fn each_platform_builds_in_its_own_place() {
        let (target, foreign) = (Path::new("/r/target"), Path::new("/r/target/aarch64"));
        let agent = &IMAGES[1];
        let (args, path) = build_of(agent, AMD64, target, foreign);
        assert_eq!(args, agent.build);
        assert_eq!(path, Path::new("/r/target/agent/watcher-agent"));
        let (args, path) = build_of(agent, crate::platform::ARM64, target, foreign);
        let joined = args.join(" ");
        assert!(joined.ends_with("--target aarch64-unknown-linux-gnu -- -C target-feature=+crt-static"), "{joined}");
        assert_eq!(path, Path::new("/r/target/aarch64/aarch64-unknown-linux-gnu/agent/watcher-agent"));
        let (args, path) = build_of(&IMAGES[0], crate::platform::ARM64, target, foreign);
        assert_eq!(args[args.len() - 2..], ["--target", "aarch64-unknown-linux-gnu"], "no rustc arguments: at the end");
        assert_eq!(path, Path::new("/r/target/aarch64/aarch64-unknown-linux-gnu/dist/watcher-operator"));
    }

    #[test]
    fn the_release_notes_are_the_versions_section() {
        let changelog =
            "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-12-02\n\n### Added\n- all\n\n## [0.1.0]\n- old\n";
        assert_eq!(release_notes(changelog, "0.2.0").expect("notes"), "### Added\n- all\n");
        assert!(release_notes(changelog, "0.3.0").is_err());
        let tree = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../CHANGELOG.md"))
            .expect("CHANGELOG.md");
        let notes = release_notes(&tree, env!("CARGO_PKG_VERSION")).expect("this version's notes");
        assert!(notes.contains("### Upgrade notes"), "{notes}");
    }

    #[test]
    fn only_this_keys_signature_of_this_payload_counts() {
        let signer = Signer::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cosign.key")).expect("key");
        let payload = sign::payload("r/x", "sha256:abc");
        let signature = base64::engine::general_purpose::STANDARD.encode(signer.sign(&payload).expect("signed"));
        let manifest = |digest: String, signature: &str| {
            serde_json::to_vec(&json!({"layers": [{"digest": digest, "annotations": {sign::ANNOTATION: signature}}]}))
                .expect("json")
        };
        assert!(signed_by(&manifest(oci::digest(&payload), &signature), &payload, &signer));
        assert!(!signed_by(&manifest(oci::digest(b"other"), &signature), &payload, &signer));
        assert!(!signed_by(&manifest(oci::digest(&payload), "AAAA"), &payload, &signer));
    }

    #[test]
    fn the_tree_is_checked_without_writing_the_index() {
        let dir = std::env::temp_dir().join(format!("xtask-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let root = dir.display().to_string();
        let git = |a: &[&str]| {
            cmd::run("git", &[&["-C", root.as_str(), "-c", "user.name=t", "-c", "user.email=t@t"], a].concat())
        };
        git(&["init", "-q"]).expect("git init");
        std::fs::write(dir.join("Cargo.toml"), CARGO).expect("write");
        git(&["add", "Cargo.toml"]).expect("git add");
        git(&["commit", "-q", "-m", "one"]).expect("git commit");
        // A file whose time is not the index's (a fresh clone's racily clean entries, a file
        // written again unchanged): a plain `git status` looks at it again and writes the index.
        let file = std::fs::File::options().append(true).open(dir.join("Cargo.toml")).expect("open");
        file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60)).expect("mtime");
        drop(file);
        let index = dir.join(".git/index");
        let before = std::fs::read(&index).expect("index");
        assert_eq!(uncommitted_changes(&dir).expect("status"), "");
        assert_eq!(std::fs::read(&index).expect("index"), before, "the index was written");
        std::fs::write(dir.join("Cargo.toml"), "changed").expect("write");
        assert_eq!(uncommitted_changes(&dir).expect("status"), " M Cargo.toml");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `.ci/last-release` names the newest version CHANGELOG.md has released, and a commit of
    /// this history: a release that is not recorded fails here, not in a CI run that upgrades
    /// from the one before it.
    #[test]
    fn the_last_release_is_recorded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
        let record = std::fs::read_to_string(root.join(LAST_RELEASE)).expect(LAST_RELEASE);
        let (version, commit) = record.trim().split_once(' ').expect("VERSION COMMIT");
        let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).expect("CHANGELOG.md");
        let released = changelog
            .lines()
            .filter_map(|l| l.strip_prefix("## ["))
            .filter_map(|l| l.split_once(']'))
            .find(|(v, rest)| *v != "Unreleased" && rest.starts_with(" - "))
            .map(|(v, _)| v);
        assert_eq!(released, Some(version), "{LAST_RELEASE} names {version}, CHANGELOG.md's last release differs");
        assert!(commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()), "{commit:?}: a whole commit id");
        let git = |a: &[&str]| std::process::Command::new("git").arg("-C").arg(root).args(a).output().expect("git");
        let shallow = git(&["rev-parse", "--is-shallow-repository"]);
        if String::from_utf8_lossy(&shallow.stdout).trim() == "false" {
            let ancestor = git(&["merge-base", "--is-ancestor", commit, "HEAD"]);
            assert!(ancestor.status.success(), "{commit} is not a commit of this history");
        }
    }
}
