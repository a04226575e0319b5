//! Signatures in cosign's format, with a key: the simple-signing payload naming the digest, an
//! ECDSA P-256 signature over it (SHA-256, ASN.1 DER), stored as the one layer of the manifest
//! at `sha256-<hex>.sig` with the signature, base64, in `dev.cosignproject.cosign/signature`.
//! `cosign verify --key cosign.pub --insecure-ignore-tlog` accepts it (no transparency log is
//! reachable here; docs/release.md).

use std::path::Path;

use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::json;

/// The media type of a signature's payload layer.
pub(crate) const PAYLOAD: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation that holds the signature.
pub(crate) const ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The DER prefix of a P-256 SubjectPublicKeyInfo (RFC 5480): the algorithm and curve, then
/// the 65-byte uncompressed point.
const SPKI_P256_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The release's signing key.
pub(crate) struct Signer {
    key: EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
}

impl Signer {
    /// The PEM private key at `path`: PKCS#8 (`BEGIN PRIVATE KEY`, as `openssl genpkey
    /// -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes it), ECDSA P-256.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the key {}", path.display()))?;
        Self::from_pem(&text).with_context(|| format!("the key {}", path.display()))
    }

    fn from_pem(text: &str) -> anyhow::Result<Self> {
        if text.contains("ENCRYPTED PRIVATE KEY") {
            bail!(
                "is encrypted: give it unencrypted (openssl pkey -in KEY -out PLAIN), kept where only the release runs"
            );
        }
        if text.contains("BEGIN EC PRIVATE KEY") {
            bail!("is a SEC1 key: convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.p8`");
        }
        let der = pem_body(text, "PRIVATE KEY").context("no `BEGIN PRIVATE KEY` block (a PEM PKCS#8 key)")?;
        let rng = ring::rand::SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der, &rng)
            .map_err(|e| anyhow::anyhow!("not an ECDSA P-256 key ({e}): make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`"))?;
        Ok(Self { key, rng })
    }

    /// The signature (DER) of `payload`.
    pub(crate) fn sign(&self, payload: &[u8]) -> anyhow::Result<Vec<u8>> {
        let signature = self.key.sign(&self.rng, payload).map_err(|e| anyhow::anyhow!("cannot sign: {e}"))?;
        Ok(signature.as_ref().to_vec())
    }

    /// The public key, PEM (`BEGIN PUBLIC KEY`): `cosign.pub` of the release.
    pub(crate) fn public_pem(&self) -> String {
        let mut der = SPKI_P256_PREFIX.to_vec();
        der.extend_from_slice(self.key.public_key().as_ref());
        let body = STANDARD.encode(der);
        let lines: Vec<&str> = body.as_bytes().chunks(64).filter_map(|c| std::str::from_utf8(c).ok()).collect();
        format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n", lines.join("\n"))
    }

    /// Whether `signature` (base64 DER, as the annotation holds it) is this key's over `payload`.
    pub(crate) fn verifies(&self, payload: &[u8], signature: &str) -> bool {
        let Ok(der) = STANDARD.decode(signature.trim()) else { return false };
        let public = ring::signature::UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, self.key.public_key().as_ref());
        public.verify(payload, &der).is_ok()
    }
}

/// The simple-signing payload cosign signs: the repository and the manifest digest.
pub(crate) fn payload(repository: &str, digest: &str) -> Vec<u8> {
    let document = json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    });
    serde_json::to_vec(&document).unwrap_or_default()
}

/// cosign's tag for what belongs to `digest` (`sha256:<hex>` → `sha256-<hex>.<suffix>`).
pub(crate) fn tag_for(digest: &str, suffix: &str) -> String {
    format!("{}.{suffix}", digest.replacen(':', "-", 1))
}

fn pem_body(text: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let body: String = text[start..stop].chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key as `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` wrote it.
    const KEY: &str = include_str!("../fixtures/cosign.key");

    #[test]
    fn a_signature_verifies_with_the_public_key_and_only_over_its_payload() {
        let signer = Signer::from_pem(KEY).expect("key");
        let payload = payload("127.0.0.1:5000/watcher/watcher-agent", "sha256:abc");
        let signature = STANDARD.encode(signer.sign(&payload).expect("signed"));
        assert!(signer.verifies(&payload, &signature));
        assert!(!signer.verifies(b"other", &signature));
        assert!(signer.public_pem().starts_with("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE"));
    }

    #[test]
    fn the_payload_names_the_digest_as_cosign_does() {
        let document: serde_json::Value = serde_json::from_slice(&payload("r/x", "sha256:abc")).expect("json");
        assert_eq!(document["critical"]["image"]["docker-manifest-digest"], "sha256:abc");
        assert_eq!(document["critical"]["type"], "cosign container image signature");
        assert_eq!(tag_for("sha256:abc", "sig"), "sha256-abc.sig");
    }

    #[test]
    fn keys_that_are_not_p256_pkcs8_are_refused_with_what_to_do() {
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n";
        assert!(Signer::from_pem(sec1).err().is_some_and(|e| e.to_string().contains("pkcs8 -topk8")));
        assert!(Signer::from_pem("nothing").err().is_some_and(|e| e.to_string().contains("BEGIN PRIVATE KEY")));
        let garbage = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(Signer::from_pem(garbage).err().is_some_and(|e| e.to_string().contains("P-256")));
    }
}
