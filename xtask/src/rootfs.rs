//! An image's files: the binary, the shared libraries it loads (none for the static
//! supervisor), the users `nonroot` (65532) and `root`, and the CA bundle for the two binaries
//! that speak TLS to the API server and beyond. Nothing else: no shell, no package manager.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};

/// The user every image runs as (distroless' `nonroot`).
pub(crate) const USER: &str = "65532:65532";

const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnonroot:x:65532:\n";
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A file of an image: its bytes and mode, by its path without the leading `/`.
pub(crate) type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// The files of the image that runs `binary` (at `/usr/local/bin/<its name>`).
pub(crate) fn files(binary: &Path) -> anyhow::Result<Files> {
    let name = binary.file_name().and_then(|n| n.to_str()).context("the binary has no file name")?;
    let mut files = Files::new();
    let bytes = std::fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    files.insert(format!("usr/local/bin/{name}"), (bytes, 0o755));
    files.insert("etc/passwd".into(), (PASSWD.as_bytes().to_vec(), 0o644));
    files.insert("etc/group".into(), (GROUP.as_bytes().to_vec(), 0o644));
    for library in shared_libraries(binary)? {
        let bytes = std::fs::read(&library).with_context(|| format!("cannot read {library}"))?;
        files.insert(library.trim_start_matches('/').to_owned(), (bytes, 0o755));
    }
    // The supervisor runs in other images' sidecars and speaks to no one: no CA bundle.
    if name != "watcher-supervise" {
        let bundle = std::fs::read(CA_BUNDLE)
            .with_context(|| format!("cannot read {CA_BUNDLE} (Debian's ca-certificates package)"))?;
        files.insert(CA_BUNDLE.trim_start_matches('/').to_owned(), (bundle, 0o644));
    }
    Ok(files)
}

/// The libraries `ldd` says `binary` loads, the dynamic loader among them; none for a static
/// binary.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<String>> {
    let said = crate::cmd::capture("ldd", &[binary])?;
    let text = format!("{}{}", said.stdout, said.stderr);
    if text.contains("not a dynamic executable") || text.contains("statically linked") {
        return Ok(Vec::new());
    }
    if !said.ok {
        bail!("ldd {} failed: {}", binary.display(), text.trim());
    }
    Ok(libraries_in(&said.stdout))
}

/// The absolute paths of an `ldd` listing (`libc.so.6 => /lib/…/libc.so.6 (0x…)`,
/// `/lib64/ld-linux-x86-64.so.2 (0x…)`; the vDSO has none).
fn libraries_in(listing: &str) -> Vec<String> {
    let path = |line: &str| {
        let after = line.split("=>").nth(1).unwrap_or(line);
        after.split_whitespace().next().filter(|p| p.starts_with('/')).map(str::to_owned)
    };
    let mut paths: Vec<String> = listing.lines().filter_map(path).collect();
    paths.sort();
    paths.dedup();
    paths
}

/// `cargo xtask rootfs`: the files written under `out`, as deploy/Dockerfile copies them.
pub(crate) fn write_dir(binary: &Path, out: &Path) -> anyhow::Result<()> {
    if out.exists() && std::fs::read_dir(out)?.next().is_some() {
        bail!("{} is not empty", out.display());
    }
    for (path, (bytes, mode)) in files(binary)? {
        let target = out.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, bytes).with_context(|| format!("cannot write {}", target.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_libraries_of_an_ldd_listing() {
        let listing = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\
                       \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        assert_eq!(
            libraries_in(listing),
            ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libgcc_s.so.1", "/lib64/ld-linux-x86-64.so.2"]
        );
    }

    #[test]
    fn an_image_of_a_dynamic_binary_carries_its_loader_and_users() {
        // Any dynamic binary of the machine stands for the operator's.
        let files = files(Path::new("/bin/ls")).expect("files");
        assert!(files.contains_key("usr/local/bin/ls"));
        assert!(files.keys().any(|p| p.contains("ld-linux")), "{:?}", files.keys());
        assert!(String::from_utf8_lossy(&files["etc/passwd"].0).contains(":65532:65532:"));
    }
}
