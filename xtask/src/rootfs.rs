//! An image's files: the binary, the shared libraries it loads (none for the static
//! supervisor), the users `nonroot` (65532) and `root`, and the CA bundle for the two binaries
//! that speak TLS to the API server and beyond. Nothing else: no shell, no package manager.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The user every image runs as (distroless' `nonroot`).
pub(crate) const USER: &str = "65532:65532";

const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnonroot:x:65532:\n";
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A file of an image: its bytes and mode, by its path without the leading `/`.
pub(crate) type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// The files of the image that runs `binary` (at `/usr/local/bin/<its name>`): a binary of
/// this machine's architecture (its libraries as `ldd` finds them), or of another one whose
/// C library is under `foreign` (a root, and the architecture's multiarch name: Debian's
/// `libc6:arm64` under `/`, `aarch64-linux-gnu`).
pub(crate) fn files(binary: &Path, foreign: Option<(&Path, &str)>) -> anyhow::Result<Files> {
    let name = binary.file_name().and_then(|n| n.to_str()).context("the binary has no file name")?;
    let mut files = Files::new();
    let bytes = std::fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    files.insert(format!("usr/local/bin/{name}"), (bytes, 0o755));
    files.insert("etc/passwd".into(), (PASSWD.as_bytes().to_vec(), 0o644));
    files.insert("etc/group".into(), (GROUP.as_bytes().to_vec(), 0o644));
    let libraries = match foreign {
        None => shared_libraries(binary)?.into_iter().map(|l| (PathBuf::from(&l), l)).collect(),
        Some((root, multiarch)) => cross_libraries(binary, root, multiarch)?,
    };
    for (source, library) in libraries {
        let bytes = std::fs::read(&source).with_context(|| format!("cannot read {}", source.display()))?;
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

/// The loader and the libraries `binary` (an ELF of another architecture) loads, and theirs,
/// as `readelf` reads them (`ldd` cannot run it): each read from `root`'s `/lib/<multiarch>/`
/// (the loader from the path the binary names) and held at the same path in the image, where
/// that architecture's Debian loader looks. None for a static binary.
fn cross_libraries(binary: &Path, root: &Path, multiarch: &str) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let (interpreter, mut wanted) = elf_needs(binary)?;
    let under_root = |path: &str| root.join(path.trim_start_matches('/'));
    let mut found = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    if let Some(interpreter) = interpreter {
        let loader = Path::new(&interpreter).file_name().and_then(|n| n.to_str()).context("the loader's name")?;
        found.push((under_root(&interpreter), interpreter.clone()));
        seen.insert(loader.to_owned());
    }
    while let Some(name) = wanted.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let library = format!("/lib/{multiarch}/{name}");
        let source = under_root(&library);
        if !source.is_file() {
            bail!(
                "{} needs {library}, which is not under {} (Debian's libc6:{}?)",
                binary.display(),
                root.display(),
                multiarch.split('-').next().unwrap_or(multiarch)
            );
        }
        wanted.extend(elf_needs(&source)?.1);
        found.push((source, library));
    }
    found.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(found)
}

/// An ELF file's program interpreter and the libraries it needs (`DT_NEEDED`), by `readelf`.
fn elf_needs(file: &Path) -> anyhow::Result<(Option<String>, Vec<String>)> {
    let listing =
        crate::cmd::run("readelf", &[std::ffi::OsStr::new("-l"), "-d".as_ref(), "-W".as_ref(), file.as_os_str()])?;
    Ok(parse_elf_needs(&listing))
}

/// `readelf -l -d -W`'s `[Requesting program interpreter: …]` and `(NEEDED) Shared library: […]`.
fn parse_elf_needs(listing: &str) -> (Option<String>, Vec<String>) {
    let bracketed = |line: &str, after: &str| {
        let rest = line.split(after).nth(1)?;
        Some(rest.trim_start().strip_prefix('[')?.split(']').next()?.to_owned())
    };
    let interpreter = listing.lines().find_map(|l| {
        let rest = l.split("Requesting program interpreter:").nth(1)?;
        Some(rest.trim().trim_end_matches(']').to_owned())
    });
    let needed =
        listing.lines().filter(|l| l.contains("(NEEDED)")).filter_map(|l| bracketed(l, "Shared library:")).collect();
    (interpreter, needed)
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
    for (path, (bytes, mode)) in files(binary, None)? {
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
    fn a_cross_binarys_loader_and_libraries_from_readelf() {
        let listing = "Program Headers:\n  INTERP 0x000238 ...\n      [Requesting program interpreter: /lib/ld-linux-aarch64.so.1]\n\
                       Dynamic section at offset 0x1 contains 30 entries:\n\
                       \x20 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]\n\
                       \x20 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]\n\
                       \x20 0x000000000000000e (SONAME)             Library soname: [x.so]\n";
        let (interpreter, needed) = parse_elf_needs(listing);
        assert_eq!(interpreter.as_deref(), Some("/lib/ld-linux-aarch64.so.1"));
        assert_eq!(needed, ["libgcc_s.so.1", "libc.so.6"]);
        assert_eq!(parse_elf_needs("Program Headers:\n  LOAD 0x0\n"), (None, Vec::new()), "a static binary");
    }

    /// Where Debian's arm64 C library is installed (`libc6:arm64`): an arm64 binary's image
    /// holds its loader and its libraries, where the arm64 loader looks for them.
    #[test]
    fn an_arm64_images_libraries_come_from_libc6_arm64() {
        if !Path::new("/lib/aarch64-linux-gnu/libc.so.6").is_file() {
            eprintln!("no libc6:arm64 here: not tested");
            return;
        }
        // A dynamic arm64 program, made by the cross compiler.
        let dir = std::env::temp_dir().join(format!("xtask-arm64-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("main.c"), "#include <math.h>\nint main(int c, char **v) { return (int)sqrt(c); }\n")
            .expect("source");
        let built = std::process::Command::new("aarch64-linux-gnu-gcc")
            .args(["-o", "program", "main.c", "-lm"])
            .current_dir(&dir)
            .status();
        if !built.is_ok_and(|s| s.success()) {
            eprintln!("no aarch64-linux-gnu-gcc here: not tested");
            return;
        }
        let files = files(&dir.join("program"), Some((Path::new("/"), "aarch64-linux-gnu"))).expect("files");
        let paths: Vec<&str> = files.keys().map(String::as_str).collect();
        for path in ["lib/ld-linux-aarch64.so.1", "lib/aarch64-linux-gnu/libc.so.6", "lib/aarch64-linux-gnu/libm.so.6"]
        {
            assert!(paths.contains(&path), "{path} in {paths:?}");
        }
        assert!(!paths.contains(&"lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"), "the loader once: {paths:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_image_of_a_dynamic_binary_carries_its_loader_and_users() {
        // Any dynamic binary of the machine stands for the operator's.
        let files = files(Path::new("/bin/ls"), None).expect("files");
        assert!(files.contains_key("usr/local/bin/ls"));
        assert!(files.keys().any(|p| p.contains("ld-linux")), "{:?}", files.keys());
        assert!(String::from_utf8_lossy(&files["etc/passwd"].0).contains(":65532:65532:"));
    }
}
